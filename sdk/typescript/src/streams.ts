// Reading streamed answers: NDJSON lines (a process's output) and Server-Sent Events (the
// event stream), and a small queue that turns pushed items into an async iterator with
// backpressure.
import type { Readable } from "node:stream";

/** Each line of a byte stream (split at \n; a trailing \r is dropped), as it completes. */
export async function* lines(src: AsyncIterable<Buffer | string>): AsyncGenerator<string> {
  let rest = "";
  const decoder = new TextDecoder("utf-8");
  for await (const chunk of src) {
    rest += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
    let i: number;
    while ((i = rest.indexOf("\n")) >= 0) {
      let line = rest.slice(0, i);
      rest = rest.slice(i + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      yield line;
    }
  }
  rest += decoder.decode();
  if (rest.length) yield rest;
}

export interface SseMessage {
  /** The `id:` of the message, or null when it had none. */
  id: string | null;
  /** The `event:` of the message ("message" when it had none). */
  event: string;
  /** The `data:` lines, joined by \n. */
  data: string;
}

/** Parses Server-Sent Events (the WHATWG rules: \n, \r\n or \r line ends; comments;
 * several data lines; retry) into messages. onRetry gets each `retry:` value. */
export async function* sse(
  src: AsyncIterable<Buffer | string>,
  onRetry?: (ms: number) => void,
): AsyncGenerator<SseMessage> {
  let id: string | null = null;
  let event = "";
  let data: string[] = [];
  let any = false;
  const decoder = new TextDecoder("utf-8");
  let rest = "";
  let lastWasCR = false;
  const handle = function* (line: string): Generator<SseMessage> {
    if (line === "") {
      if (any) {
        yield { id, event: event || "message", data: data.join("\n") };
      }
      event = "";
      data = [];
      any = false;
      id = null;
      return;
    }
    if (line.startsWith(":")) return;
    const c = line.indexOf(":");
    const field = c < 0 ? line : line.slice(0, c);
    let value = c < 0 ? "" : line.slice(c + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "data":
        data.push(value);
        any = true;
        break;
      case "event":
        event = value;
        break;
      case "id":
        if (!value.includes("\0")) id = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) onRetry?.(Number(value));
        break;
    }
  };
  for await (const chunk of src) {
    let text = typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
    // a \r\n cut between two chunks: the \n belongs to the \r already taken
    if (lastWasCR && text.startsWith("\n")) text = text.slice(1);
    rest += text;
    let m: RegExpExecArray | null;
    const re = /\r\n|\r|\n/g;
    let start = 0;
    while ((m = re.exec(rest))) {
      // a lone \r at the very end may be the first half of \r\n: decide with the next chunk
      if (m[0] === "\r" && m.index === rest.length - 1) break;
      yield* handle(rest.slice(start, m.index));
      start = m.index + m[0].length;
    }
    rest = rest.slice(start);
    lastWasCR = false;
    if (rest.endsWith("\r")) {
      yield* handle(rest.slice(0, -1));
      rest = "";
      lastWasCR = true;
    }
  }
}

/** Items pushed by a producer, pulled by one async iterator. pause/resume are called when
 * more than highWater items wait, and when the consumer has taken them. */
export class AsyncQueue<T> implements AsyncIterableIterator<T> {
  private items: T[] = [];
  private waiting: ((r: IteratorResult<T>) => void) | null = null;
  private failWaiting: ((e: unknown) => void) | null = null;
  private ended = false;
  private error: unknown = undefined;
  private paused = false;

  constructor(
    private readonly src?: Readable,
    private readonly highWater = 64,
    private readonly onReturn?: () => void,
  ) {}

  push(item: T): void {
    if (this.ended) return;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = this.failWaiting = null;
      w({ value: item, done: false });
      return;
    }
    this.items.push(item);
    if (this.items.length > this.highWater && this.src && !this.paused) {
      this.paused = true;
      this.src.pause();
    }
  }

  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    if (this.waiting && this.items.length === 0) {
      const w = this.waiting;
      const f = this.failWaiting!;
      this.waiting = this.failWaiting = null;
      if (error !== undefined) f(error);
      else w({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<T>> {
    if (this.items.length) {
      const value = this.items.shift()!;
      if (this.paused && this.items.length <= this.highWater / 2) {
        this.paused = false;
        this.src?.resume();
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.ended) {
      if (this.error !== undefined) {
        const e = this.error;
        this.error = undefined;
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => {
      this.waiting = resolve;
      this.failWaiting = reject;
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.items = [];
    this.end();
    this.onReturn?.();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
