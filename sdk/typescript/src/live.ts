// Long answers read as they come: the event stream (SSE) and a process's output (NDJSON).
// Each starts connecting when made (await .ready to know it is connected), is iterated with
// for await, and close() ends it from anywhere; a break out of the loop closes it too.
import type { IncomingMessage } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import type { OutputEvent } from "./attach.js";
import { ProtocolError } from "./errors.js";
import { lines, sse } from "./streams.js";
import type { StreamItem } from "./types.js";

abstract class Live<T> implements AsyncIterable<T> {
  /** Settles once the first connection is answered (rejects with its error). */
  readonly ready: Promise<void>;
  protected res: IncomingMessage | undefined;
  protected closed = false;
  private first: Promise<IncomingMessage>;
  private iterating = false;

  constructor(protected readonly connect: () => Promise<IncomingMessage>) {
    this.first = connect();
    this.first.then(
      (res) => {
        this.res = res;
        if (this.closed) res.destroy();
      },
      () => {},
    );
    this.ready = this.first.then(() => undefined);
    this.ready.catch(() => {});
  }

  protected abstract read(res: IncomingMessage): AsyncGenerator<T>;

  /** Whether to connect again once a connection ended (the event stream's reconnect). */
  protected async again(): Promise<boolean> {
    return false;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    if (this.iterating) throw new TypeError("this stream is already being read");
    this.iterating = true;
    let next: Promise<IncomingMessage> | null = this.first;
    try {
      while (next && !this.closed) {
        const res = await next;
        this.res = res;
        next = null;
        let more: boolean | null = null;
        try {
          for await (const item of this.read(res)) {
            if (this.closed) return;
            yield item;
          }
        } catch (e) {
          if (this.closed) return;
          more = await this.again();
          if (!more) throw e;
        }
        if (this.closed) return;
        if (more ?? (await this.again())) next = this.connect();
      }
    } finally {
      this.close();
    }
  }

  /** Ends the stream: the connection closes and the iteration ends. */
  close(): void {
    this.closed = true;
    this.res?.destroy();
  }
}

/** The live event stream (GET /v1/events/stream): the sandboxes' events (StreamEvent, with
 * seq and sandbox) and, for the operator and admins, the node's (no seq). */
export class EventStream extends Live<StreamItem> {
  /** The id of the last event read: where a reconnect resumes. */
  lastEventId: string | null;
  private retryMs = 2000;

  /** open(null) connects the first time (or again before any event came), open(id) resumes
   * after the event id. */
  constructor(
    open: (lastEventId: string | null) => Promise<IncomingMessage>,
    private readonly reconnect: boolean,
  ) {
    let self: EventStream | undefined;
    super(() => open(self ? self.lastEventId : null));
    self = this;
    this.lastEventId = null;
  }

  protected override async again(): Promise<boolean> {
    if (!this.reconnect || this.closed) return false;
    await sleep(this.retryMs);
    return !this.closed;
  }

  protected async *read(res: IncomingMessage): AsyncGenerator<StreamItem> {
    for await (const m of sse(res, (ms) => (this.retryMs = ms))) {
      if (m.id !== null && m.id !== "") this.lastEventId = m.id;
      let item: StreamItem;
      try {
        item = JSON.parse(m.data) as StreamItem;
      } catch (e) {
        throw new ProtocolError("protocol", `an event that is not JSON: ${m.data.slice(0, 100)}`, 200, { cause: e });
      }
      yield item;
    }
  }
}

/** A process's output (GET …/processes/{pid}/output), from the oldest byte kept, live until
 * it ends: {stream, data} with the bytes, {dropped}, and last {exit_code}. */
export class OutputStream extends Live<OutputEvent> {
  protected async *read(res: IncomingMessage): AsyncGenerator<OutputEvent> {
    for await (const line of lines(res)) {
      if (!line) continue;
      let o: { stream?: string; data?: string; dropped?: number; exit_code?: number; timed_out?: boolean };
      try {
        o = JSON.parse(line);
      } catch (e) {
        throw new ProtocolError("protocol", `an output line that is not JSON: ${line.slice(0, 100)}`, 200, { cause: e });
      }
      if (o.stream === "stdout" || o.stream === "stderr")
        yield { stream: o.stream, data: Buffer.from(o.data ?? "", "base64") };
      else if (typeof o.dropped === "number") yield { dropped: o.dropped };
      else if (typeof o.exit_code === "number")
        yield o.timed_out ? { exit_code: o.exit_code, timed_out: true } : { exit_code: o.exit_code };
    }
  }

  /** Reads the rest: stdout and stderr together, and the exit code (null when the stream
   * ended without one). */
  async collect(): Promise<{ stdout: Buffer; stderr: Buffer; exit_code: number | null; timed_out: boolean }> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let exit_code: number | null = null;
    let timed_out = false;
    for await (const ev of this) {
      if ("stream" in ev) (ev.stream === "stdout" ? out : err).push(ev.data);
      else if ("exit_code" in ev) {
        exit_code = ev.exit_code;
        timed_out = ev.timed_out === true;
      }
    }
    return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), exit_code, timed_out };
  }
}
