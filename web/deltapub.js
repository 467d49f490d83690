// deltapub.js: a WebSocket client for deltapub brokers (docs/websocket.md).
// A plain ES module, no dependencies:
//
//   import { Client } from "./deltapub.js";
//   const c = new Client(["ws://127.0.0.1:7080/v1/ws", "ws://127.0.0.1:7081/v1/ws"], { token: "..." });
//   await c.connected();
//   const sub = await c.subscribe("[class,eq,'STOCK'],[price,>,100]", (d) => console.log(d));
//   await c.publish({ class: "STOCK", price: 120 }, "payload");
//
// After a lost connection the client reconnects with a paced, bounded
// backoff (250 ms doubling to 5 s, at most maxAttempts tries in a row) and
// resumes its session: it presents the session's token and its last
// position per subscription and publisher stream, and the broker sends
// what it missed, then live; no delivery is shown twice. When the broker
// cannot (the session expired, or its history no longer holds everything),
// onStatus("reconnected", {recovered: false, gaps}) says so, and the
// client subscribes again, presenting its positions: the broker (the same
// or another one of the list) delivers what the subscription missed, from
// the publishers' edges (also of publishers it had no delivery from yet,
// by how long ago it was first confirmed), then live; onStatus("recovered", {sub, recovered,
// gaps}) says whether everything was found. Publications not yet
// acknowledged are sent again (same publisher, epoch and seq: the broker
// drops what it already has).
//
// Durable subscriptions (subscribeDurable) keep a checkpoint token, the
// same binary token as the Go client's (package checkpoint), here in
// base64: store it (token(id)) and subscribe with it again, on any broker,
// to get every matching publication once.

// monotonicNow is a clock in milliseconds that wall-clock changes do not
// move.
const monotonicNow = () => (globalThis.performance ? globalThis.performance.now() : Date.now());

export class Client {
  // url: one WebSocket URL or a list of them (brokers of one overlay); a
  // reconnect tries the last one first, then the next ones in turn.
  constructor(url, opts = {}) {
    this.urls = Array.isArray(url) ? url.slice() : [url];
    if (this.urls.length === 0) throw new Error("deltapub: no URL");
    this.base = 0; // the URL of the last good connection
    this.token = opts.token || "";
    this.publisher = opts.publisher || "web-" + Math.random().toString(36).slice(2, 10);
    this.epoch = opts.epoch || Date.now();
    this.maxAttempts = opts.maxAttempts || 20;
    this.onStatus = opts.onStatus || (() => {});
    this.onError = opts.onError || (() => {});
    this.seq = 0;
    this.nextReq = 1;
    this.subs = new Map(); // request id -> {filter, onDeliver, id, resolve, reject}
    this.bySubID = new Map(); // broker's sub id -> entry
    this.unacked = new Map(); // seq -> {frame, resolve, reject}
    this.session = ""; // the broker's name for this session, for a resume
    this.closed = false;
    this.attempt = 0;
    this._ready = null;
    this._open();
  }

  // connected resolves once the broker has welcomed this session.
  connected() {
    return this._ready.promise;
  }

  _open() {
    let resolve, reject;
    const p = new Promise((res, rej) => { resolve = res; reject = rej; });
    p.catch(() => {});
    if (!this._ready || this._ready.settled) this._ready = { promise: p, resolve, reject, settled: false };
    this.url = this.urls[(this.base + Math.max(0, this.attempt - 1)) % this.urls.length];
    const ws = new WebSocket(this.url, ["deltapub.v1.json"]);
    this.ws = ws;
    ws.onopen = () => {
      const hello = { type: "hello", token: this.token, publisher: this.publisher, epoch: this.epoch };
      if (this.session) {
        hello.resume = this.session;
        hello.positions = [];
        for (const s of this.subs.values()) {
          if (!s.id) continue;
          for (const [src, seq] of s.last) {
            const [publisher, epoch] = JSON.parse(src);
            hello.positions.push({ sub: s.id, publisher, epoch, seq });
          }
        }
      }
      ws.send(JSON.stringify(hello));
    };
    ws.onmessage = (ev) => this._frame(JSON.parse(ev.data));
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.onStatus("disconnected", { code: ev.code, reason: ev.reason });
      if (this.closed) return;
      if (this.attempt >= this.maxAttempts) {
        this.onStatus("failed", { attempts: this.attempt });
        this._ready.reject(new Error("deltapub: gave up after " + this.attempt + " attempts"));
        return;
      }
      const wait = Math.min(5000, 250 * 2 ** this.attempt);
      this.attempt++;
      setTimeout(() => { if (!this.closed) this._open(); }, wait);
    };
  }

  _send(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  _frame(f) {
    switch (f.type) {
      case "welcome": {
        const again = this.welcomed;
        this.welcomed = true;
        this.base = this.urls.indexOf(this.url);
        this.attempt = 0;
        this.broker = f.broker;
        this.session = f.session;
        if (!f.resumed) {
          // A new session (another broker, or the old one forgot it):
          // subscribe again, each subscription recovering from its
          // positions (a durable one from its token).
          this.bySubID.clear();
          for (const [req, s] of this.subs) {
            if (!s.id && !s.durable && s.last.size === 0 && !again) {
              this._send(this._subscribeFrame(req, s));
              continue;
            }
            s.id = null;
            s.recovering = true;
            this._send(this._subscribeFrame(req, s));
          }
        }
        for (const u of this.unacked.values()) this._send(u.frame);
        this._ready.settled = true;
        this._ready.resolve();
        const info = { broker: f.broker };
        if (again) {
          info.resumed = !!f.resumed; // false: each subscription recovers anew (status "recovered")
          info.recovered = !!f.recovered;
          info.gaps = f.gaps || [];
        }
        this.onStatus(again ? "reconnected" : "connected", info);
        break;
      }
      case "suback": {
        const s = this.subs.get(f.id);
        if (!s) break;
        if (f.code) {
          // A broker that is not ready (joining, or repairing the overlay
          // after a crash) says "retry later": ask again, paced, at most
          // 50 times in a row.
          if (/retry later|backpressure/.test(f.message || "") && (s.refusals = (s.refusals || 0) + 1) <= 50) {
            const ws = this.ws;
            setTimeout(() => { if (this.ws === ws && this.subs.get(f.id) === s) this._send(this._subscribeFrame(f.id, s)); }, 200);
            break;
          }
          this.subs.delete(f.id);
          s.reject(new Error(f.message));
          break;
        }
        s.refusals = 0;
        if (s.id !== f.sub) {
          s.id = f.sub;
          this.bySubID.set(f.sub, s);
        }
        s.resolve(f.sub);
        if (f.confirmed && s.confirmedAt === undefined) s.confirmedAt = monotonicNow();
        if (f.confirmed && s.onConfirmed) s.onConfirmed(f.sub);
        if (f.confirmed && f.recovered !== undefined) {
          s.recovering = false;
          this.onStatus("recovered", { broker: this.broker, sub: f.sub, recovered: f.recovered, gaps: f.gaps || [] });
        }
        break;
      }
      case "silence": {
        const s = this.bySubID.get(f.sub);
        if (s && s.durable) for (const x of f.sources) s.durable.advance(x.publisher, x.epoch, x.seq);
        break;
      }
      case "deliver": {
        const s = this.bySubID.get(f.sub);
        if (!s) break;
        // Per subscription and publisher stream, sequence numbers only
        // grow: anything at or below the last one is a replay already seen.
        const src = JSON.stringify([f.publisher, f.epoch]);
        if ((s.last.get(src) || 0) >= f.seq) break;
        if (s.durable && s.durable.from(f.publisher, f.epoch) >= f.seq) break;
        s.last.set(src, f.seq);
        if (s.durable) s.durable.consume(f.publisher, f.epoch, f.seq);
        s.onDeliver({ publisher: f.publisher, epoch: f.epoch, seq: f.seq, attrs: f.attrs, payload: f.payload ?? "", time: f.time });
        break;
      }
      case "gap": {
        const s = this.bySubID.get(f.sub);
        if (s && s.durable) s.durable.advance(f.publisher, f.epoch, f.to);
        if (s && s.onGap) s.onGap(f);
        break;
      }
      case "puback": {
        if (f.code === "backpressure") {
          // The broker asks for a pause: send the same publications again later.
          setTimeout(() => { for (const u of this.unacked.values()) if (u.seq >= f.seq) this._send(u.frame); }, 200);
          break;
        }
        for (const [seq, u] of this.unacked) {
          if (seq > f.seq) continue;
          this.unacked.delete(seq);
          if (f.code && seq === f.seq) u.reject(new Error(f.message)); else u.resolve();
        }
        break;
      }
      case "error":
        this.onError(f);
        break;
    }
  }

  // subscribe resolves with the subscription's id once the broker accepted
  // it; onDeliver gets {publisher, epoch, seq, attrs, payload, time}.
  // opts.onConfirmed(id) is called once every broker has the subscription
  // (from then on the delivery guarantees apply), opts.onGap(frame) on a
  // gap notice. filter is PADRES text or [[attr, op, value], ...].
  // opts.conflate = {key, intervalMs}: per value of attribute key, only the
  // latest publication of each interval (docs/websocket.md, "Conflation").
  subscribe(filter, onDeliver, opts = {}) {
    return this._subscribe(filter, onDeliver, opts, null);
  }

  // subscribeDurable makes (opts.token absent) or resumes (opts.token: a
  // base64 token from token(id)) the durable subscription name: every
  // matching publication acknowledged after it was first confirmed is
  // delivered once, in per-publisher order, across reconnects to any
  // broker, except ranges announced by onGap (docs/durable.md). The
  // missed ones come before the confirmation.
  subscribeDurable(name, filter, onDeliver, opts = {}) {
    if (!name) return Promise.reject(new Error("deltapub: subscribeDurable: empty name"));
    let d;
    try {
      d = opts.token ? Token.decode(opts.token) : new Token(name);
    } catch (e) {
      return Promise.reject(e);
    }
    if (d.name !== name) return Promise.reject(new Error(`deltapub: the token belongs to ${JSON.stringify(d.name)}, not ${JSON.stringify(name)}`));
    return this._subscribe(filter, onDeliver, opts, d);
  }

  // token is a durable subscription's checkpoint token (base64) after
  // every delivery handed to onDeliver so far: store it to resume later.
  token(subID) {
    const s = this.bySubID.get(subID);
    return s && s.durable ? s.durable.encode() : null;
  }

  // ack acknowledges a durable subscription's token (once stored) to the
  // broker.
  ack(subID, token) {
    this._send({ type: "ack", sub: subID, token: token || this.token(subID) });
  }

  _subscribe(filter, onDeliver, opts, durable) {
    const req = this.nextReq++;
    const conflate = opts.conflate ? { key: opts.conflate.key, interval_ms: opts.conflate.intervalMs } : undefined;
    return new Promise((resolve, reject) => {
      const s = { filter, conflate, durable, onDeliver, onGap: opts.onGap, onConfirmed: opts.onConfirmed, id: null, last: new Map(), resolve, reject, req };
      this.subs.set(req, s);
      this._send(this._subscribeFrame(req, s));
    });
  }

  _subscribeFrame(req, s) {
    const f = { type: "subscribe", id: req, filter: s.filter };
    if (s.conflate) f.conflate = s.conflate;
    if (s.durable) {
      f.durable = s.durable.name;
      if (s.durable.entries.length > 0) f.token = s.durable.encode();
    } else if (s.recovering) {
      f.recover = true;
      // How long ago it began: the broker also recovers publishers it
      // has no position for, from what they published since then.
      if (s.confirmedAt !== undefined) f.since_ms = Math.max(1, Math.ceil(monotonicNow() - s.confirmedAt));
      f.positions = [];
      for (const [src, seq] of s.last) {
        const [publisher, epoch] = JSON.parse(src);
        f.positions.push({ publisher, epoch, seq });
      }
    }
    return f;
  }

  unsubscribe(subID) {
    const s = this.bySubID.get(subID);
    if (!s) return;
    this.subs.delete(s.req);
    this.bySubID.delete(subID);
    this._send({ type: "unsubscribe", sub: subID });
  }

  // publish resolves when the broker has acknowledged the publication.
  publish(attrs, payload) {
    const seq = ++this.seq;
    const frame = { type: "publish", seq, attrs, time: Date.now() * 1e6 };
    if (payload !== undefined) frame.payload = payload;
    return new Promise((resolve, reject) => {
      this.unacked.set(seq, { seq, frame, resolve, reject });
      this._send(frame);
    });
  }

  close() {
    this.closed = true;
    if (this.ws) this.ws.close(1000, "client closing");
  }
}

// Token is a durable subscription's checkpoint token, encoded as the Go
// package checkpoint does (docs/durable.md):
//   "DPCT" | version 1 | uvarint len(name) | name | uvarint count |
//   count × (uvarint len(publisher) | publisher | uvarint epoch |
//   uvarint seq | uvarint horizon) | CRC-32C (big endian)
// with entries in increasing (publisher bytes, epoch) order.
export class Token {
  constructor(name) {
    this.name = name;
    this.entries = []; // {pub: Uint8Array, publisher, epoch: BigInt, seq: BigInt, horizon: BigInt}
  }

  _entry(publisher, epoch) {
    const pub = utf8.encode(publisher);
    const ep = BigInt(epoch);
    let lo = 0, hi = this.entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const e = this.entries[mid];
      const c = cmpBytes(e.pub, pub) || (e.epoch < ep ? -1 : e.epoch > ep ? 1 : 0);
      if (c === 0) return e;
      if (c < 0) lo = mid + 1; else hi = mid;
    }
    const e = { pub, publisher, epoch: ep, seq: 0n, horizon: 0n };
    this.entries.splice(lo, 0, e);
    return e;
  }

  from(publisher, epoch) {
    const e = this._entry(publisher, epoch);
    return Number(e.seq > e.horizon ? e.seq : e.horizon);
  }

  consume(publisher, epoch, seq) {
    const e = this._entry(publisher, epoch);
    if (BigInt(seq) > e.seq) e.seq = BigInt(seq);
  }

  advance(publisher, epoch, h) {
    const e = this._entry(publisher, epoch);
    if (BigInt(h) > e.horizon) e.horizon = BigInt(h);
  }

  encode() {
    const b = [0x44, 0x50, 0x43, 0x54, 1];
    const name = utf8.encode(this.name);
    putUvarint(b, BigInt(name.length));
    b.push(...name);
    putUvarint(b, BigInt(this.entries.length));
    for (const e of this.entries) {
      putUvarint(b, BigInt(e.pub.length));
      b.push(...e.pub);
      putUvarint(b, e.epoch);
      putUvarint(b, e.seq);
      putUvarint(b, e.horizon);
    }
    const sum = crc32c(b);
    b.push(sum >>> 24, (sum >>> 16) & 255, (sum >>> 8) & 255, sum & 255);
    return btoa(String.fromCharCode(...b));
  }

  static decode(b64) {
    const b = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const bad = (why) => new Error("deltapub: bad checkpoint token: " + why);
    if (b.length < 9 || b[0] !== 0x44 || b[1] !== 0x50 || b[2] !== 0x43 || b[3] !== 0x54) throw bad("not a deltapub checkpoint token");
    if (b[4] !== 1) throw bad("version " + b[4]);
    const body = b.subarray(0, b.length - 4);
    const sum = ((b[b.length - 4] << 24) | (b[b.length - 3] << 16) | (b[b.length - 2] << 8) | b[b.length - 1]) >>> 0;
    if (crc32c(body) !== sum) throw bad("checksum mismatch (damaged)");
    let i = 5;
    const uv = () => {
      let v = 0n, shift = 0n;
      for (;;) {
        if (i >= body.length) throw bad("truncated number");
        const x = body[i++];
        v |= BigInt(x & 127) << shift;
        if (x < 128) return v;
        shift += 7n;
      }
    };
    const bytes = () => {
      const n = Number(uv());
      if (i + n > body.length) throw bad("truncated string");
      const s = body.slice(i, i + n);
      i += n;
      return s;
    };
    const t = new Token(utf8.decode(bytes()));
    const n = Number(uv());
    for (let k = 0; k < n; k++) {
      const pub = bytes();
      t.entries.push({ pub, publisher: utf8.decode(pub), epoch: uv(), seq: uv(), horizon: uv() });
    }
    if (i !== body.length) throw bad("bytes after the last entry");
    return t;
  }
}

const utf8 = { enc: new TextEncoder(), dec: new TextDecoder(), encode(s) { return this.enc.encode(s); }, decode(b) { return this.dec.decode(b); } };

function cmpBytes(a, b) {
  for (let i = 0; i < a.length && i < b.length; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return a.length - b.length;
}

function putUvarint(b, v) {
  while (v >= 128n) {
    b.push(Number(v & 127n) | 128);
    v >>= 7n;
  }
  b.push(Number(v));
}

let crcTable;
function crc32c(bytes) {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (const x of bytes) c = crcTable[(c ^ x) & 255] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
