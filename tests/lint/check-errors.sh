#!/bin/sh
# check-errors.sh: only the daemon's API layer (daemon/api/) speaks in HTTP errors. Code
# elsewhere in daemon/ reports what went wrong as a kind (types/error.h) and never chooses an
# HTTP status or an API error code; the API's one table (api/api-error.c) turns a kind into
# both. The statuses and codes are read from that table, so a new one is checked as soon as
# it is added. Usage: check-errors.sh SOURCE_DIR. Prints each finding, exits 1 if any.
exec perl -x "$0" "$@"
#!perl
use strict;
use warnings;
use File::Find;

my $root = shift or die "usage: check-errors.sh SOURCE_DIR\n";

# No file is exempt: http/server.c hands a protocol error (a malformed or late request) to
# the API layer's protocol_error handler, which answers it. The one status the server writes
# itself is 101, the upgrade's own answer (conn_upgrade): that is the protocol, not an error.
my %exempt = ();
my %exempt_status = ('daemon/http/server.c' => { 101 => 1 });

# Every status the API could answer, whether or not the table uses it yet.
my %status = map { $_ => 1 } qw(100 101 200 201 202 204 206 301 302 303 304 307 308 400 401
  403 404 405 406 408 409 410 411 412 413 414 415 416 417 422 425 426 428 429 431 451 500 501
  502 503 504 505 507);

sub slurp {
	my ($path) = @_;
	open(my $fh, '<', $path) or die "check-errors: $path: $!\n";
	local $/;
	return scalar <$fh>;
}

# Comments blanked (and, unless keep_strings, the insides of string and character
# literals), with every newline kept so that offsets still give line numbers.
sub blank {
	my ($s, $keep_strings) = @_;
	$s =~ s{(/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')}{
		my $m = $1;
		if ($m =~ m{^/}) {
			$m =~ s/[^\n]/ /g;
		} elsif (!$keep_strings) {
			$m = substr($m, 0, 1) . (' ' x (length($m) - 2)) . substr($m, -1);
		}
		$m;
	}gse;
	return $s;
}

my $table = blank(slurp("$root/daemon/api/api-error.c"), 1);
my %code;
while ($table =~ /\[ERR_\w+\]\s*=\s*\{([^}]*)\}/g) {
	my $e = $1;
	$status{$1} = 1 if $e =~ /\.status\s*=\s*(\d{3})\b/;
	$code{$1} = 1 if $e =~ /\.code\s*=\s*"(\w+)"/;
}
die "check-errors: no [ERR_...] = { .status, .code } entries in daemon/api/api-error.c\n"
  unless %code;
my $codes = join('|', sort keys %code);

my @files;
find(sub { push @files, $File::Find::name if /\.[ch]$/ }, "$root/daemon");
my $found = 0;

sub report {
	my ($rel, $text, $pos, $what) = @_;
	my $line = 1 + (substr($text, 0, $pos) =~ tr/\n//);
	print "$rel:$line: $what\n";
	$found++;
}

# The call whose argument list holds offset pos: the callee's name, or undef when pos is in
# no call's parentheses (a condition, a declaration, an expression statement).
sub callee {
	my ($s, $pos) = @_;
	my $depth = 0;
	for (my $i = $pos - 1; $i >= 0; $i--) {
		my $c = substr($s, $i, 1);
		if ($c eq ')') {
			$depth++;
		} elsif ($c eq '(') {
			if ($depth-- == 0) {
				my $before = substr($s, 0, $i);
				return $before =~ /(\w+)\s*$/ ? $1 : undef;
			}
		} elsif ($depth == 0 && ($c eq ';' || $c eq '{' || $c eq '}')) {
			return undef;
		}
	}
	return undef;
}

# The function whose body holds offset pos: the name at the start of the nearest line above
# that begins with one and a '(' (this tree puts the return type on the line before).
sub function_at {
	my ($s, $pos) = @_;
	my $before = substr($s, 0, $pos);
	return $before =~ /.*^(\w+)\(/ms ? $1 : '';
}

for my $path (sort @files) {
	(my $rel = $path) =~ s{^\Q$root\E/}{};
	my $raw = slurp($path);
	my $code_text = blank($raw, 1);
	my $bare = blank($raw, 0);

	# Every file, the API's own too: a struct err is read as unfilled only if it starts so.
	while ($bare =~ /\bstruct\s+err\s+\w+\s*;/g) {
		report($rel, $bare, $-[0], 'a struct err declared without "= {}"');
	}
	next if $rel =~ m{^daemon/api/} || $exempt{$rel};

	# An API error code as a value: an argument, an initialiser, an assignment, a
	# returned or chosen value.
	while ($code_text =~ /(?:[(,={?:]|\breturn)\s*("(?:$codes)")/g) {
		report($rel, $code_text, $-[1], "API error code $1 outside daemon/api/");
	}

	# An HTTP status used as one: passed to a call about errors, replies or statuses,
	# stored in something called a status, returned from such a function, or paired with
	# an errno or a kind in an initialiser (a mapping table).
	while ($bare =~ /(?<![\w.])(\d{3})(?![\w.])/g) {
		my ($n, $at) = ($1, $-[1]);
		next unless $status{$n};
		next if $exempt_status{$rel} && $exempt_status{$rel}{$n};
		my $before = substr($bare, 0, $at);
		my $after = substr($bare, $at + 3, 40);
		my $fn = callee($bare, $at) // '';
		my $lhs = $before =~ /(\w+)\s*(?<![=!<>])=\s*$/ ? $1 : '';
		my $func = $before =~ /\breturn\s*$/ ? function_at($bare, $at) : '';
		my $group = '';
		if ($before =~ /\{([^{}]*)$/) {
			my $open = $1;
			$group = $open . $1 if substr($bare, $at) =~ /^([^{}]*)\}/;
		}
		my $why;
		if ($fn =~ /err|fail|reply|status|answer|respond/i && $before =~ /[(,]\s*$/ &&
		    $after =~ /^\s*[,)]/) {
			$why = "passed to $fn()";
		} elsif ($lhs =~ /status|http/i) {
			$why = "assigned to $lhs";
		} elsif ($func =~ /status|http|code|err/i) {
			$why = "returned from $func()";
		} elsif ($group =~ /\bE[A-Z0-9]{2,}\b|\bERR_\w+/ && $before =~ /[{,]\s*$/) {
			$why = 'paired with an error in an initialiser';
		}
		report($rel, $bare, $at, "HTTP status $n $why outside daemon/api/") if $why;
	}
}

if ($found) {
	print "check-errors: $found finding(s): outside daemon/api/, report a kind with err_set() " .
	  "(types/error.h); daemon/api/api-error.c maps it to a status and a code\n";
	exit 1;
}
print "check-errors: clean\n";
