// deltapub.js: a WebSocket client for deltapub brokers (docs/websocket.md).
// A plain ES module, no dependencies:
//
//   import { Client } from "./deltapub.js";
//   const c = new Client("ws://127.0.0.1:7080/v1/ws", { token: "..." });
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
// client subscribes again. Publications not yet acknowledged are sent
// again (same publisher, epoch and seq: the broker drops what it already
// has).

export class Client {
  constructor(url, opts = {}) {
    this.url = url;
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
        this.attempt = 0;
        this.broker = f.broker;
        this.session = f.session;
        if (!f.resumed) {
          // A new session: subscribe again (new ids; positions start over).
          this.bySubID.clear();
          for (const [req, s] of this.subs) {
            s.id = null;
            s.last = new Map();
            this._send(this._subscribeFrame(req, s.filter, s.conflate));
          }
        }
        for (const u of this.unacked.values()) this._send(u.frame);
        this._ready.settled = true;
        this._ready.resolve();
        const info = { broker: f.broker };
        if (again) {
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
          this.subs.delete(f.id);
          s.reject(new Error(f.message));
          break;
        }
        if (s.id !== f.sub) {
          s.id = f.sub;
          this.bySubID.set(f.sub, s);
        }
        s.resolve(f.sub);
        if (f.confirmed && s.onConfirmed) s.onConfirmed(f.sub);
        break;
      }
      case "deliver": {
        const s = this.bySubID.get(f.sub);
        if (!s) break;
        // Per subscription and publisher stream, sequence numbers only
        // grow: anything at or below the last one is a replay already seen.
        const src = JSON.stringify([f.publisher, f.epoch]);
        if ((s.last.get(src) || 0) >= f.seq) break;
        s.last.set(src, f.seq);
        s.onDeliver({ publisher: f.publisher, epoch: f.epoch, seq: f.seq, attrs: f.attrs, payload: f.payload ?? "", time: f.time });
        break;
      }
      case "gap": {
        const s = this.bySubID.get(f.sub);
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
    const req = this.nextReq++;
    const conflate = opts.conflate ? { key: opts.conflate.key, interval_ms: opts.conflate.intervalMs } : undefined;
    return new Promise((resolve, reject) => {
      this.subs.set(req, { filter, conflate, onDeliver, onGap: opts.onGap, onConfirmed: opts.onConfirmed, id: null, last: new Map(), resolve, reject, req });
      this._send(this._subscribeFrame(req, filter, conflate));
    });
  }

  _subscribeFrame(req, filter, conflate) {
    const f = { type: "subscribe", id: req, filter };
    if (conflate) f.conflate = conflate;
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
