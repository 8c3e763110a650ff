/* agentproto.h: the host <-> guest protocol (sbx-agent/1) spoken over the virtio-serial port
 * between sandboxd and sandbox-guestd. One byte pipe carries everything, multiplexed by
 * frames (lib/frame.h); variable payloads are TLV lists (lib/tlv.h).
 *
 * Trust: the guest trusts the host; the host treats everything the guest sends as hostile.
 * Every frame and every TLV is bounded before anything is allocated, and a violation closes
 * the channel (host) or makes the guest hunt for the next session start (guest).
 *
 * Sessions. QEMU serves one host connection at a time, and a new connection can carry stale
 * bytes (a client queued in the listen backlog, the tail of a frame the guest wrote before the
 * old connection went). So every connection starts with AP_MAGIC followed by a HELLO frame
 * carrying a fresh host nonce; the guest drops what it had queued for the old session and
 * answers AP_MAGIC + HELLO_ACK echoing the nonce; the host ignores everything before that.
 *
 * Processes and output. Processes belong to the guest, not to a session. Each process's
 * output (stdout and stderr interleaved, or the PTY) is numbered by byte offset from 0; the
 * guest keeps the newest AP_RING bytes. ATTACH asks for output from an offset: the guest sends
 * DROPPED if older bytes are gone, then OUTPUT frames in order, then EXIT once the process has
 * ended and all its output was sent. While attached, the guest sends at most AP_WINDOW bytes
 * beyond the last ACK and stops reading the process meanwhile (lossless backpressure); with no
 * session or no ATTACH, it keeps reading and the ring keeps the newest bytes. Processes
 * started with keep unset are killed when their session ends.
 *
 * Tunnels. EXEC with a PORT TLV (ARG and the rest are then ignored) makes the agent itself
 * (root, in the guest's network namespace) connect to 127.0.0.1:PORT instead of starting a
 * process. RESULT comes once the connect is done: PID, the tunnel's handle (from the same
 * numbering as processes), or ERRNO (ECONNREFUSED: nothing listens). The handle then works like a
 * process's: ATTACH/ACK/DETACH carry what the socket reads as OUTPUT (stream AP_STDOUT) with the
 * same window (the socket is read only while attached and the window is open: nothing is lost);
 * STDIN bytes are written to the socket, and AP_F_EOF shuts its write side (shutdown SHUT_WR)
 * once they are written. The guest answers the bytes STDIN delivered with STDIN_ACK (the count
 * written to the socket so far), so the host keeps at most its own window of them in flight.
 * When the socket's read side ends, EXIT follows the last OUTPUT: code 0 for an orderly EOF, 1
 * for an error (a reset); the handle still takes STDIN until the host's EOF or RELEASE. RELEASE
 * closes the socket at any time. Tunnels are not processes: never in PS, never SIGNALed or
 * counted, and closed when their session ends.
 *
 * Stdin. The guest queues STDIN bytes per handle and writes them to the process (or the
 * socket) as it reads them; it answers them with STDIN_ACK: the bytes of this session's STDIN
 * frames for that handle that left its queue so far (written, or thrown away once the reader
 * is gone: a closed pipe, an ended process, a reset socket). A host that announced
 * AP_FEAT_STDIN_WINDOW in its HELLO keeps at most AP_STDIN_WINDOW unacknowledged bytes of
 * stdin in flight per handle (lossless backpressure); the guest logs a host that sends more as
 * a protocol violation (it still queues them up to STDIN_MAX, 16 MiB, and logs any it has to
 * throw away). A host without it (sandboxd before this) sends stdin unbounded and the guest
 * keeps the old behaviour: it queues 16 MiB per handle and drops, with a warning, what comes
 * beyond. The ACK counts restart at 0 with every session (bytes an earlier session left in
 * the queue are written, not acknowledged).
 *
 * Versions. HELLO and HELLO_ACK carry FEATURES, a u32 of AP_FEAT_* bits the sender supports;
 * an absent FEATURES is 0 (an agent or host from before it). The host uses a feature only when
 * both sides have it: a VM a previous sandboxd started (adopted with --keep-sandboxes) runs
 * that build's agent, whose HELLO_ACK has no FEATURES, so its processes' stdin goes unbounded,
 * as before, rather than waiting forever for acknowledgements that agent never sends.
 *
 * Violations. For a handle the host follows, each of these closes the connection: OUTPUT off
 * the next offset or beyond AP_WINDOW past the last ACK (or the ATTACH's offset, or the end of
 * a DROPPED), OUTPUT/DROPPED/EXIT after its EXIT, an EXEC's success without PID, STDIN_ACK for
 * more bytes than the host sent, a tunnel's STDIN_ACK going backwards, and a process's
 * STDIN_ACK from an agent that did not announce AP_FEAT_STDIN_WINDOW. Frames for a handle the
 * host does not follow are ignored (it may have just let go of it).
 *
 * Requests (EXEC, PS, FILE_*, SHUTDOWN, PING) carry a host-chosen request id in chan and are
 * answered by frames with that chan, ending with one RESULT. */
#pragma once

#include <stdint.h>

#define AP_MAGIC "\xffSBXAGT1"
#define AP_MAGIC_LEN 8
#define AP_FRAME_MAX (1u << 20)    /* payload bytes in one frame */
#define AP_RING (1u << 20)         /* output bytes the guest keeps per process */
#define AP_WINDOW (1u << 20)       /* unacknowledged output bytes in flight per process */
#define AP_STDIN_WINDOW (2u << 20) /* unacknowledged stdin bytes in flight per handle */
#define AP_NONCE_LEN 16
#define AP_ENTROPY_LEN 32
#define AP_MAX_ARGS 4096
#define AP_MAX_ENV 4096
#define AP_PATH_MAX 4096

/* Frame types. Host to guest below 0x80, guest to host from 0x80; FILE_DATA goes both ways. */
enum ap_type {
	AP_HELLO = 0x01,       /* chan 0; TLV: NONCE, TIME_NS, ENTROPY, HOSTNAME, ROOT_DEV,
	                        * UPPER_DEV, ENV (image env, "K=V", repeated), UID, GID, HOME,
	                        * FEATURES */
	AP_EXEC = 0x02,        /* chan req; TLV: ARG..., ENV..., CWD, TTY, ROWS, COLS, KEEP; or
	                        * PORT alone: a tunnel (see Tunnels) */
	AP_STDIN = 0x03,       /* chan pid; raw bytes; flag AP_F_EOF closes stdin after them */
	AP_SIGNAL = 0x04,      /* chan pid; u32 signal number */
	AP_RESIZE = 0x05,      /* chan pid; u16 rows, u16 cols */
	AP_ATTACH = 0x06,      /* chan pid; u64 offset to replay from */
	AP_DETACH = 0x07,      /* chan pid; stop sending output (the process runs on) */
	AP_ACK = 0x08,         /* chan pid; u64 offset received */
	AP_RELEASE = 0x09,     /* chan pid; forget an exited process and its output */
	AP_PS = 0x0a,          /* chan req; answered by PROC frames, then RESULT */
	AP_FILE_READ = 0x0b,   /* chan req; TLV: PATH, SIZE (most bytes wanted); answered by
	                        * FILE_DATA frames, then RESULT with SIZE */
	AP_FILE_WRITE = 0x0c,  /* chan req; TLV: PATH, SIZE (bytes that follow), MODE; then
	                        * FILE_DATA frames from the host; answered by RESULT */
	AP_FILE_DATA = 0x0d,   /* chan req; raw bytes (both directions). From the host, flag
	                        * AP_F_EOF ends a write's data early (SIZE was only its most)
	                        * and AP_F_ABORT gives the write up (no file is made) */
	AP_FILE_LIST = 0x0e,   /* chan req; TLV: PATH; answered by DIRENT frames, then RESULT */
	AP_FILE_REMOVE = 0x0f, /* chan req; TLV: PATH; answered by RESULT (SIZE: a file's) */
	AP_SHUTDOWN = 0x10,    /* chan req; sync, unmount, power off (RESULT first) */
	AP_PING = 0x11,        /* chan req; answered by RESULT */
	AP_HOLD = 0x12,        /* chan req; the VM is about to be suspended: until the next
	                        * HELLO, a session's end kills no process (those without KEEP
	                        * too: they carry on after the resume). Answered by RESULT; an
	                        * older guest answers ENOSYS */

	AP_HELLO_ACK = 0x81, /* chan 0; TLV: NONCE, VERSION, BOOT_ID, UPTIME_MS, MOUNTED,
	                      * FEATURES */
	AP_RESULT = 0x82,    /* chan req; TLV: ERRNO (0: success), MESSAGE, PID, SIZE */
	AP_OUTPUT = 0x83,    /* chan pid; u8 stream (AP_STDOUT/AP_STDERR), u64 offset, bytes */
	AP_DROPPED = 0x84,   /* chan pid; u64 how many bytes before the ring's start are gone */
	AP_EXIT = 0x85,      /* chan pid; i32 exit code (128 + signal when killed), u64 end offset;
	                      * flag AP_F_OOM: the OOM killer ended it (code 137) */
	AP_PROC = 0x86,      /* chan req; TLV: PID, ARG (argv[0]), TTY, KEEP, STATE, EXIT_CODE,
	                      * OOM, STARTED_MS, SIZE (output bytes so far) */
	AP_DIRENT = 0x87,    /* chan req; TLV: NAME, FTYPE, SIZE */
	AP_STDIN_ACK = 0x88, /* chan handle; u64 STDIN bytes of this session that left the
	                      * guest's queue (see Stdin) */
};

enum ap_flags {
	AP_F_EOF = 1 << 0,   /* STDIN, and FILE_DATA from the host: the write ends here */
	AP_F_ABORT = 1 << 1, /* FILE_DATA from the host: the write is given up */
	AP_F_OOM = 1 << 2,   /* EXIT: the guest's OOM killer ended the process */
};

enum ap_stream {
	AP_STDOUT = 1,
	AP_STDERR = 2,
};

/* TLV tags. Strings carry no NUL; integers are big-endian of the size given. */
enum ap_tag {
	AP_T_NONCE = 1,       /* 16 bytes */
	AP_T_TIME_NS = 2,     /* u64: host CLOCK_REALTIME in ns */
	AP_T_ENTROPY = 3,     /* 32 bytes for the guest's RNG */
	AP_T_HOSTNAME = 4,    /* string */
	AP_T_ROOT_DEV = 5,    /* string: the read-only image disk, e.g. /dev/vda */
	AP_T_UPPER_DEV = 6,   /* string: the writable layer, e.g. /dev/vdb */
	AP_T_ENV = 7,         /* string "K=V" (repeated) */
	AP_T_UID = 8,         /* u32 */
	AP_T_GID = 9,         /* u32 */
	AP_T_HOME = 10,       /* string */
	AP_T_VERSION = 11,    /* string */
	AP_T_BOOT_ID = 12,    /* string */
	AP_T_UPTIME_MS = 13,  /* u64 */
	AP_T_MOUNTED = 14,    /* u8: the root is set up */
	AP_T_ARG = 15,        /* string (repeated, in order) */
	AP_T_CWD = 16,        /* string */
	AP_T_TTY = 17,        /* u8 */
	AP_T_ROWS = 18,       /* u16 */
	AP_T_COLS = 19,       /* u16 */
	AP_T_KEEP = 20,       /* u8 */
	AP_T_ERRNO = 21,      /* u32: a Linux errno, 0 for success */
	AP_T_MESSAGE = 22,    /* string */
	AP_T_PID = 23,        /* u32 */
	AP_T_SIZE = 24,       /* u64 */
	AP_T_PATH = 25,       /* string: absolute */
	AP_T_MODE = 26,       /* u32 */
	AP_T_STATE = 27,      /* u8: 1 running, 2 exited */
	AP_T_EXIT_CODE = 28,  /* u32 (i32 in two's complement) */
	AP_T_STARTED_MS = 29, /* u64: guest CLOCK_REALTIME ms */
	AP_T_NAME = 30,       /* string */
	AP_T_FTYPE = 31,      /* u8: 'f' file, 'd' directory, 'l' link, 'o' other */
	AP_T_OOM = 32,        /* u8: the OOM killer ended it (present only when it did) */
	AP_T_PORT = 33,       /* u16: EXEC opens a tunnel to 127.0.0.1:PORT (1..65535) */
	AP_T_FEATURES = 34,   /* u32: AP_FEAT_* bits (HELLO: the host's, HELLO_ACK: the guest's) */
	AP_T_NET = 35,        /* string: HELLO, "GUEST/PREFIX,HOST" (as sandbox.net= on the kernel
	                       * command line), "" for none: the guest (re)configures its link */
	AP_T_MAC = 36,        /* 6 bytes: HELLO, the link's MAC (set when it differs) */
	AP_T_MACHINE_ID = 37, /* string: HELLO, 32 lowercase hex for /etc/machine-id */
	AP_T_VOLUME = 38,     /* string: HELLO, "DEV\tMOUNTPOINT\tro" or "...\trw" (repeated): a
	                       * drive to mount once the root is set up */
};

/* What a side supports beyond sbx-agent/1 as first released (see Versions). */
enum ap_feature {
	/* guest: STDIN_ACK for processes too; host: at most AP_STDIN_WINDOW in flight */
	AP_FEAT_STDIN_WINDOW = 1u << 0,
};

enum ap_proc_state {
	AP_PROC_RUNNING = 1,
	AP_PROC_EXITED = 2,
};
