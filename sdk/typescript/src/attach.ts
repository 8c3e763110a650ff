// An attachment to a process over sbx-stream/1 (docs/api.md, attach): after the 101 both
// sides send frames, one type byte, a big-endian u32 length, the payload (at most 1 MiB).
// Server to client: o (stdout), E (stderr), d (u64: bytes no longer kept), x (i32: the exit
// code, last). Client to server: i (stdin), e (end of input), s (a signal name), r (u16 rows,
// u16 cols).
import type { Socket } from "node:net";
import { ProtocolError } from "./errors.js";
import { AsyncQueue } from "./streams.js";

/** What a process printed or did: the same shapes as a line of …/output, the bytes decoded. */
export type OutputEvent =
  | { stream: "stdout" | "stderr"; data: Buffer }
  | { dropped: number }
  | { exit_code: number; timed_out?: boolean };

export const MAX_FRAME = 1 << 20;

export function frame(type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 1, "latin1");
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** Splits a byte stream into frames; feed() answers the complete ones so far. */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);

  feed(chunk: Buffer): { type: string; payload: Buffer }[] {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    const out: { type: string; payload: Buffer }[] = [];
    while (this.buf.length >= 5) {
      const n = this.buf.readUInt32BE(1);
      if (n > MAX_FRAME) throw new ProtocolError("protocol", `an attach frame of ${n} bytes (at most 1 MiB)`, 101);
      if (this.buf.length < 5 + n) break;
      out.push({ type: String.fromCharCode(this.buf[0]!), payload: this.buf.subarray(5, 5 + n) });
      this.buf = this.buf.subarray(5 + n);
    }
    return out;
  }

  get pending(): number {
    return this.buf.length;
  }
}

/** An interactive session with a process: iterate it for its output (OutputEvent, the last
 * one {exit_code}); write() its stdin, end() it, resize() its TTY, signal() it; close()
 * detaches (the process runs on). The connection closes by itself after the exit code. */
export class Attachment implements AsyncIterable<OutputEvent> {
  /** The exit code once the `x` frame came, else null. */
  exitCode: number | null = null;
  private readonly queue: AsyncQueue<OutputEvent>;
  private readonly reader = new FrameReader();
  private readonly exited: Promise<number | null>;
  private closed = false;

  constructor(private readonly socket: Socket) {
    this.queue = new AsyncQueue<OutputEvent>(socket, 256);
    let settle!: (v: number | null) => void;
    this.exited = new Promise((r) => (settle = r));
    socket.on("data", (chunk: Buffer) => {
      let frames;
      try {
        frames = this.reader.feed(chunk);
      } catch (e) {
        this.queue.end(e);
        socket.destroy();
        return;
      }
      for (const f of frames) {
        switch (f.type) {
          case "o":
            this.queue.push({ stream: "stdout", data: Buffer.from(f.payload) });
            break;
          case "E":
            this.queue.push({ stream: "stderr", data: Buffer.from(f.payload) });
            break;
          case "d":
            if (f.payload.length === 8) this.queue.push({ dropped: Number(f.payload.readBigUInt64BE(0)) });
            break;
          case "x":
            if (f.payload.length === 4) {
              this.exitCode = f.payload.readInt32BE(0);
              this.queue.push({ exit_code: this.exitCode });
              settle(this.exitCode);
            }
            break;
          default:
          // a frame type this version does not know: skip it
        }
      }
    });
    socket.on("error", (e) => {
      if (!this.closed && this.exitCode === null) this.queue.end(e);
    });
    socket.on("close", () => {
      this.closed = true;
      this.queue.end();
      settle(this.exitCode);
    });
  }

  /** Its output as it comes. Leaving a loop early (break) does not detach: a later loop
   * goes on where this one stopped; close() detaches. */
  [Symbol.asyncIterator](): AsyncIterator<OutputEvent> {
    return {
      next: () => this.queue.next(),
      return: async () => ({ value: undefined, done: true }),
    };
  }

  private send(type: string, payload?: Buffer): void {
    if (this.socket.destroyed || !this.socket.writable) return; // the process ended: nothing to send to
    this.socket.write(frame(type, payload));
  }

  /** Bytes for the process's stdin (split into frames of at most 1 MiB). */
  write(data: Buffer | Uint8Array | string): void {
    let b = typeof data === "string" ? Buffer.from(data) : Buffer.from(data);
    while (b.length > MAX_FRAME) {
      this.send("i", b.subarray(0, MAX_FRAME));
      b = b.subarray(MAX_FRAME);
    }
    if (b.length) this.send("i", b);
  }

  /** End of input: closes the process's stdin (a TTY gets its end-of-file character). */
  end(): void {
    this.send("e");
  }

  /** Resizes the process's TTY. */
  resize(rows: number, cols: number): void {
    if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 1 || cols < 1 || rows > 65535 || cols > 65535)
      throw new RangeError("rows and cols are integers from 1 to 65535");
    const p = Buffer.alloc(4);
    p.writeUInt16BE(rows, 0);
    p.writeUInt16BE(cols, 2);
    this.send("r", p);
  }

  /** Sends a signal (INT, TERM, KILL, HUP, QUIT, USR1, USR2, WINCH). */
  signal(name: string): void {
    this.send("s", Buffer.from(name));
  }

  /** The exit code once the process ended (null when the connection closed before). */
  wait(): Promise<number | null> {
    return this.exited;
  }

  /** Detaches: closes the connection; the process runs on. */
  close(): void {
    this.closed = true;
    this.socket.destroy();
  }
}
