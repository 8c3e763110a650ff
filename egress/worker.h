/* worker.h: the egress worker, `sandboxd egress-worker`: the process that reads what guests
 * send on their way out (TLS ClientHellos, HTTP request heads, DNS queries), decides each
 * connection and query against that sandbox's network policy, and splices the allowed ones to
 * the name's own addresses. It parses hostile bytes, so sandboxd runs it apart and without
 * root (docs/architecture.md, "Egress"); sandboxd starts it, feeds it the policies and reads its
 * decisions back.
 *
 * Started as (sandboxd does this; tests and benchmarks may too):
 *   sandboxd egress-worker --control-fd N (--proxy-fd N | --proxy-listen ADDR:PORT)
 *                          (--dns-fd N | --dns-listen ADDR:PORT)
 *                          [--uid N --gid N] [--handshake-timeout-ms N]
 *   --proxy-fd:  a bound, listening TCP socket (sandboxd binds it: a busy port is its error)
 *   --dns-fd:    a bound UDP socket
 *   --uid/--gid: run as these (the worker drops to them itself when started as root)
 *   --handshake-timeout-ms: a connection that has not sent its name by then is closed
 *                quietly (default 10000)
 *
 * Traffic: the host's nftables table redirects a guest's tcp/80 and tcp/443 to the proxy
 * and its udp/53 (to the host side of its link) to the DNS stub, keeping the guest's source
 * address; the worker knows the sandbox by that source address alone. A connection or query
 * from an address no "set" names is dropped.
 *
 * The control channel (--control-fd, a SOCK_STREAM unix socket): newline-terminated JSON
 * objects, one per line, at most 256 KiB each, both ways (room for the largest policy a
 * request may hold: 256 allow and 256 deny names; sandboxd checks it at compile time).
 * sandboxd -> worker:
 *   {"op":"set","id":"sbx-...","guest":"10.200.0.2","host":"10.200.0.1",
 *    "network":{"mode":"none"|"allowlist"|"open","allow":[...],"deny":[...]}}
 *       adds a sandbox or replaces its policy (network as netpolicy_resolve makes it;
 *       compiled and decided by matcher.h). Replacing it cuts (shuts down both ways) every open
 *       connection of that sandbox whose name the new policy no longer allows. A set that
 *       gives a sandbox the guest address another one holds forgets both (and cuts their
 *       connections) until the next set: traffic from that address is never decided by the
 *       wrong policy. A set without guest, host or network forgets the sandbox.
 *   {"op":"remove","id":"sbx-..."}
 *       forgets the sandbox and cuts all its connections.
 * worker -> sandboxd:
 *   {"op":"ready"}  once it listens and has dropped its privileges
 *   {"op":"egress","id":"sbx-...","via":"tls"|"http"|"dns","name":"example.org"|null,
 *    "port":443,"verdict":"allowed"|"denied","reason":"...","addr":"93.184.215.14",
 *    "bytes_out":N,"bytes_in":N,"cut":true|false}
 *       one per decision: a denied connection or query at once; an allowed connection when
 *       it ends (bytes_out: guest to server, bytes_in: back; cut: ended by a policy update
 *       or removal); an allowed DNS query at once (no addr or bytes). name is null when the
 *       guest sent none (TLS without SNI: reason "no hostname"). addr is the address dialled.
 *       Sent without blocking: when sandboxd does not read, decisions are dropped and
 *       counted, never waited for.
 *   {"op":"dropped","count":N}  how many decisions were dropped since the last such line
 * When the control channel closes the worker exits (sandboxd is gone or restarting).
 *
 * Names are resolved exactly as decided (no search domains: an allowed name that does not
 * resolve never becomes another one), afresh on every connection.
 * Refused destinations: every address the name resolves to is checked, and only the
 * acceptable ones are dialled: never loopback, unspecified, private (10/8, 172.16/12,
 * 192.168/16, fc00::/7), link-local (169.254/16 with the 169.254.169.254 metadata address,
 * fe80::/10), CGNAT (100.64/10), IETF protocol assignments (192.0.0.0/24), benchmarking
 * (198.18/15), discard (100::/64), multicast, broadcast or reserved (240/4), IPv4-mapped,
 * IPv4-compatible, NAT64, 6to4 and Teredo forms of those, nor any address of the host's own
 * interfaces or that the host's routing keeps local (checked just before the dial). A name
 * with none left is denied ("resolves only to refused addresses"), and so is one that does not
 * resolve ("the name does not resolve"; "the name could not be resolved: ..." when the resolver
 * failed). One whose addresses did not answer stays allowed ("could not connect: ..."). In each
 * of these cases a plain-HTTP guest is answered 502 Bad Gateway, a text naming the name and the
 * reason; a TLS connection is closed at once.
 * A name the policy refuses ("not on the allow list", "on the deny list", "network mode none",
 * ...) is answered alike, 403 Forbidden with the name and that reason, on plain HTTP; a TLS
 * connection is closed at once. (A request without a name, or a later request refused on a
 * kept-alive connection, is closed without an answer.) */
#pragma once

/* The process: parses argv, runs until the control channel closes. Returns the exit code. */
int egress_worker_main(int argc, char **argv);
