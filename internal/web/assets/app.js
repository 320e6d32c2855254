// sluice status page: reads /events (server-sent events), or polls
// /status.json when streams are refused or unsupported, and draws the
// figures. Every text goes in through textContent: nothing the daemon
// reports is parsed as HTML.
"use strict";

(function () {
  const HISTORY_MS = 5 * 60 * 1000;
  const POLL_MS = 2000;
  const STATES = { B: "busy", I: "idle", S: "stopped", K: "killed" };
  const SVGNS = "http://www.w3.org/2000/svg";

  let history = []; // samples, oldest first
  let last = null; // the last status received
  let pollTimer = null;
  let lastMsgAt = 0; // Date.now() of the last status received
  const STALE_MS = 10000;

  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // dur formats seconds as "4s", "3m12s", "2h05m", "3d4h".
  function dur(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? String(s % 60).padStart(2, "0") + "s" : "");
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s / 60) % 60).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
  }

  function num(n) {
    if (n === undefined || n === null) return "0";
    if (typeof n === "number" && !Number.isInteger(n)) return n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en");
    return Number(n).toLocaleString("en");
  }

  function rateText(perSec) {
    if (!perSec) return "0/s";
    if (perSec >= 1) return num(Math.round(perSec * 10) / 10) + "/s";
    if (perSec * 60 >= 1) return num(Math.round(perSec * 600) / 10) + "/min";
    return num(Math.round(perSec * 36000) / 10) + "/h";
  }

  function secsBetween(a, b) {
    return (Date.parse(b) - Date.parse(a)) / 1000;
  }

  function setLive(mode, text) {
    const live = $("live");
    live.dataset.mode = mode;
    $("live-text").textContent = text;
  }

  // ---- header ----
  function renderFacts(st) {
    const facts = $("facts");
    clear(facts);
    const add = (k, v, bad) => {
      const d = el("div");
      d.appendChild(el("dt", null, k));
      const dd = el("dd", bad ? "bad" : null, v);
      d.appendChild(dd);
      facts.appendChild(d);
    };
    if (st.version) add("version", st.version);
    if (st.started) add("up", dur(secsBetween(st.started, st.now)));
    if (st.reload && st.reload.generation) {
      let t = "gen " + st.reload.generation;
      if (st.reload.at) t += ", " + dur(secsBetween(st.reload.at, st.now)) + " ago";
      add("config", t);
      if (st.reload.failed && (!st.reload.at || Date.parse(st.reload.failed) > Date.parse(st.reload.at))) {
        add("reload", "failed " + dur(secsBetween(st.reload.failed, st.now)) + " ago", true);
      }
    }
    if (st.store) {
      let t = st.store.backend + ", " + num(st.store.keys) + (st.store.max_keys ? " / " + num(st.store.max_keys) : "") + " keys";
      add("store", t + (st.store.healthy ? "" : " — failing"), !st.store.healthy);
      if (st.store.degraded) add("state", "degraded: " + st.store.degraded, true);
    }
    if (st.mta) {
      const m = st.mta;
      let t = num(m.open) + " open / " + (m.capacity ? num(m.capacity) : "capacity unknown");
      if (m.reserved) t += " · " + num(m.reserved) + " reserved, " + num(m.reserved_unused || 0) + " unused";
      if (m.capacity) t += " · " + num(m.free) + " free";
      if (m.share) {
        t += " · " + num(m.share.networks) + " networks hold " + num(m.share.sessions) + " of " + num(m.share.budget) + " unreserved";
        if (m.share.per_net) t += ", shedding: " + num(m.share.per_net) + " per network";
        if (m.share.busy_networks) t += ", " + num(m.share.busy_networks) + (m.share.busy_networks === 1 ? " busy network" : " busy networks");
      }
      add("mta", t, !!(m.share && m.share.per_net));
    }
    if (st.escalation) {
      const e = st.escalation;
      let t = num(e.dropping) + (e.dropping === 1 ? " address" : " addresses") + " dropped by the kernel · " + num(e.tracked) + " counted · " + num(e.added) + " added, " + num(e.failed) + " failed";
      if (e.queue_full) t += ", " + num(e.queue_full) + " lost to a full queue";
      if (e.error) t += ", helper: " + e.error;
      add("escalation", t, !!e.error);
    }
    const t = st.totals || {};
    add("decisions", num(t.decisions || 0));
    add("refused", num(t.refusals || 0));
    const doors = t.doors || {};
    const deferred = Object.values(doors).reduce((n, v) => n + (v.deferred || 0), 0);
    if (deferred) add("of which deferred", num(deferred) + " (throttle)");
  }

  // ---- pool ----
  let slotRows = [];

  function renderPool(st) {
    const p = st.pool;
    const perr = $("pool-error");
    perr.textContent = st.pool_error || "";
    perr.hidden = !st.pool_error;
    $("pool-empty").hidden = !!p || !!st.pool_error;
    const strip = $("pool-strip");
    const list = $("slots");
    if (!p) {
      clear(strip);
      clear(list);
      slotRows = [];
      $("pool-summary").textContent = "";
      return;
    }
    const slots = p.slots || [];
    const counts = { B: 0, I: 0, S: 0, K: 0 };
    for (const s of slots) counts[s.state] = (counts[s.state] || 0) + 1;
    let sum = counts.B + " busy · " + counts.I + " idle · " + counts.S + " stopped";
    if (counts.K) sum += " · " + counts.K + " killed";
    sum += " · queue " + p.queued + "/" + p.queue_size + " · " + num(p.msgs) + " msgs · " + num(p.activations) + " activations";
    $("pool-summary").textContent = sum;

    if (slotRows.length !== slots.length) {
      clear(strip);
      clear(list);
      slotRows = slots.map((_, i) => {
        const cell = el("span", "cell");
        strip.appendChild(cell);
        const row = el("div", "slot");
        row.dataset.slot = String(i);
        const n = el("span", "n", i);
        const letter = el("span", "letter");
        const bar = el("div", "bar");
        const fill = el("span");
        bar.appendChild(fill);
        const age = el("span", "age");
        const tag = el("span", "tag");
        row.append(n, letter, bar, age, tag);
        list.appendChild(row);
        return { cell, row, letter, bar, fill, age, tag };
      });
    }
    const bt = p.busy_timeout_s || 0;
    const hint = $("pool-hint");
    hint.hidden = slots.length === 0;
    hint.textContent = bt > 0
      ? "Bars: how long a busy worker has been at its request, against the " + dur(bt) + " busy timeout (red past 80%). Times: in the current state."
      : "Times: in the current state. Letters: B busy, I idle, S stopped, K killed.";
    slots.forEach((s, i) => {
      const r = slotRows[i];
      const name = STATES[s.state] || s.state;
      r.cell.className = "cell " + s.state;
      r.cell.textContent = s.state;
      r.cell.title = "slot " + i + ": " + name + (s.tag ? " — " + s.tag : "");
      r.row.dataset.state = s.state;
      r.letter.textContent = s.state;
      r.letter.title = name;
      const age = s.since ? secsBetween(s.since, st.now) : 0;
      r.age.textContent = s.state === "S" ? "" : dur(age);
      let frac = 0;
      if (s.state === "B") frac = bt > 0 ? Math.min(1, age / bt) : 1;
      else if (s.state === "I" || s.state === "K") frac = 1;
      r.fill.style.width = (frac * 100).toFixed(1) + "%";
      r.bar.classList.toggle("late", s.state === "B" && bt > 0 && age / bt >= 0.8);
      r.bar.title = s.state === "B" && bt > 0 ? "busy " + dur(age) + " of the " + dur(bt) + " busy timeout" : name;
      let tag = s.tag || "";
      if (!tag) tag = s.state === "S" ? "stopped" : s.state === "I" ? "idle" + (s.cmd ? " (last " + s.cmd + ")" : "") : name;
      const extra = s.pid ? "pid " + s.pid + " · " + num(s.requests) + " req" : "";
      r.tag.textContent = tag;
      r.tag.title = extra ? tag + " — " + extra : tag;
    });
  }

  // ---- history charts ----
  function mergeHistory(samples) {
    let lastT = history.length ? history[history.length - 1].t : 0;
    for (const s of samples || []) {
      if (s.t > lastT) {
        history.push(s);
        lastT = s.t;
      }
    }
    const cut = lastT - HISTORY_MS;
    let i = 0;
    while (i < history.length && history[i].t < cut) i++;
    if (i) history = history.slice(i);
  }

  function niceMax(v) {
    if (v <= 1) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // chart draws series [{key, cls, area}] of history into an svg.
  function chart(node, series, yMax, capLine) {
    const W = Math.max(200, node.clientWidth || 400);
    const H = Math.max(80, node.clientHeight || 120);
    const L = 34, R = 6, T = 8, B = 16;
    node.setAttribute("viewBox", "0 0 " + W + " " + H);
    clear(node);
    const tMax = history.length ? history[history.length - 1].t : Date.now();
    const tMin = tMax - HISTORY_MS;
    const x = (t) => L + ((t - tMin) / HISTORY_MS) * (W - L - R);
    const y = (v) => T + (1 - v / yMax) * (H - T - B);
    for (const f of [0, 0.5, 1]) {
      node.appendChild(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(yMax * f), y2: y(yMax * f) }));
      const lab = svg("text", { class: "axis", x: L - 5, y: y(yMax * f) + 3, "text-anchor": "end" });
      lab.textContent = num(Math.round(yMax * f * 10) / 10);
      node.appendChild(lab);
    }
    for (const [t, text, anchor] of [[tMin, "−5 min", "start"], [tMax - HISTORY_MS / 2, "−2.5 min", "middle"], [tMax, "now", "end"]]) {
      const lab = svg("text", { class: "axis", x: x(t), y: H - 3, "text-anchor": anchor });
      lab.textContent = text;
      node.appendChild(lab);
    }
    if (capLine > 0) node.appendChild(svg("line", { class: "line-cap", x1: L, x2: W - R, y1: y(capLine), y2: y(capLine) }));
    if (history.length < 2) return;
    for (const s of series) {
      let d = "";
      for (const h of history) d += (d ? "L" : "M") + x(h.t).toFixed(1) + " " + y(Math.min(h[s.key] || 0, yMax)).toFixed(1);
      if (s.area) {
        const a = d + "L" + x(history[history.length - 1].t).toFixed(1) + " " + y(0) + "L" + x(history[0].t).toFixed(1) + " " + y(0) + "Z";
        node.appendChild(svg("path", { class: s.area, d: a }));
      }
      node.appendChild(svg("path", { class: s.cls, d: d, "data-points": String(history.length) }));
    }
  }

  function renderHistory() {
    $("fig-busy").hidden = !(last && last.pool);
    const lastS = history[history.length - 1] || { busy: 0, slots: 0, decisions: 0, refusals: 0 };
    let slots = 0, busyMax = 0, decMax = 0;
    for (const h of history) {
      slots = Math.max(slots, h.slots || 0);
      busyMax = Math.max(busyMax, h.busy || 0);
      decMax = Math.max(decMax, h.decisions || 0, h.refusals || 0);
    }
    $("h-busy").textContent = lastS.busy + (lastS.slots ? " of " + lastS.slots : "");
    $("h-dec").textContent = rateText(lastS.decisions);
    $("h-def").textContent = rateText(lastS.refusals);
    chart($("chart-busy"), [{ key: "busy", cls: "line-busy", area: "area-busy" }], slots >= busyMax && slots > 0 ? slots : niceMax(Math.max(busyMax, 1)), slots);
    chart($("chart-dec"), [
      { key: "decisions", cls: "line-dec", area: "area-dec" },
      { key: "refusals", cls: "line-def" },
    ], niceMax(Math.max(decMax, 1)), 0);
  }

  // ---- classes ----
  function meter(n, cap) {
    const m = el("div", "meter");
    const bar = el("div", "bar");
    const fill = el("span");
    bar.appendChild(fill);
    let frac = 0;
    if (cap > 0) {
      frac = Math.min(1, n / cap);
      if (frac >= 1) bar.classList.add("full");
      else if (frac >= 0.8) bar.classList.add("hot");
    } else {
      bar.classList.add("nocap");
      frac = n > 0 ? 0.04 : 0;
    }
    fill.style.width = (frac * 100).toFixed(1) + "%";
    m.appendChild(bar);
    m.appendChild(el("span", "fig", num(n) + " / " + (cap > 0 ? num(cap) : "∞")));
    return m;
  }

  function renderClasses(st) {
    const tb = $("classes");
    clear(tb);
    const list = st.classes || [];
    $("classes-empty").hidden = list.length > 0;
    tb.parentNode.hidden = list.length === 0;
    for (const c of list) {
      const tr = el("tr");
      tr.dataset.class = c.name;
      tr.appendChild(el("td", "mono", c.name));
      const a = el("td", "in");
      a.appendChild(meter(c.incoming, c.incoming_cap || 0));
      const b = el("td", "total");
      b.appendChild(meter(c.total, c.total_cap || 0));
      tr.append(a, b);
      tb.appendChild(tr);
    }
  }

  // ---- talkers ----
  function renderTalkers(st) {
    const tb = $("talkers");
    clear(tb);
    const list = (st.talkers || []).slice(0, 12);
    $("talkers-empty").hidden = list.length > 0;
    tb.parentNode.hidden = list.length === 0;
    for (const t of list) {
      const tr = el("tr");
      tr.appendChild(el("td", "key", t.key));
      tr.appendChild(el("td", null, t.rule));
      const r = el("td", "num", rateText(t.rate));
      tr.appendChild(r);
      const w = el("td");
      let txt = num(t.count);
      if (t.limit) txt += " / " + num(t.limit);
      if (t.period) txt += " per " + t.period;
      w.appendChild(el("div", null, txt));
      if (t.limit) {
        const bar = el("div", "bar rate-bar");
        const fill = el("span");
        const frac = Math.min(1, t.count / t.limit);
        fill.style.width = (frac * 100).toFixed(1) + "%";
        bar.appendChild(fill);
        if (frac >= 1) bar.classList.add("late");
        w.appendChild(bar);
      }
      tr.appendChild(w);
      tb.appendChild(tr);
    }
  }

  // ---- refusals ----
  function renderRefusals(st) {
    const tb = $("refusals");
    clear(tb);
    const list = (st.refusals || []).slice(0, 15);
    $("refusals-empty").hidden = list.length > 0;
    tb.parentNode.hidden = list.length === 0;
    for (const d of list) {
      const tr = el("tr");
      const ago = secsBetween(d.at, st.now);
      const when = el("td", null, dur(ago) + " ago");
      when.title = d.at;
      tr.appendChild(when);
      tr.appendChild(el("td", null, d.door));
      tr.appendChild(el("td", null, d.rule));
      tr.appendChild(el("td", "key", d.key));
      tr.appendChild(el("td", "num", num(d.count) + " / " + num(d.limit) + (d.period ? " per " + d.period : "")));
      tr.appendChild(el("td", null, d.algorithm || ""));
      const v = el("td");
      const vv = String(d.verdict || "");
      const tag = el("span", "verdict", vv);
      if (/^(DEFER|4)/i.test(vv)) tag.classList.add("defer");
      else if (/^(REJECT|5)/i.test(vv)) tag.classList.add("reject");
      v.appendChild(tag);
      tr.appendChild(v);
      tr.appendChild(el("td", "reply", d.reply || ""));
      tr.title = "rule " + d.rule + ": key " + d.key + " reached " + d.count + " of " + d.limit +
        (d.period ? " per " + d.period : "") + (d.algorithm ? " (" + d.algorithm + ")" : "") + " → " + vv +
        (d.reason ? " [" + d.reason + "]" : "");
      tb.appendChild(tr);
    }
  }

  // ---- doors ----
  function renderDoors(st) {
    const f = $("doors");
    clear(f);
    for (const d of st.doors || []) {
      const s = el("span", "door");
      s.appendChild(el("b", null, d.name));
      s.appendChild(document.createTextNode(" " + (d.listen || []).join(", ") + " · " + num(d.conns) + " conn"));
      f.appendChild(s);
    }
  }

  // ---- throttle keys a relay's ban changed ----
  function renderThrottleKeys(st) {
    const tb = $("throttle-keys");
    clear(tb);
    const list = st.throttle_keys || [];
    $("throttle-keys-card").hidden = list.length === 0;
    for (const k of list) {
      const tr = el("tr");
      tr.appendChild(el("td", "key", k.key));
      const until = k.suspended_until ? Date.parse(k.suspended_until) : 0;
      tr.appendChild(el("td", null, until > Date.parse(st.now) ? "suspended until " + k.suspended_until : "normal"));
      tr.appendChild(el("td", "num", num(k.bans || 0)));
      let lim = k.configured_limit ? num(k.configured_limit) + " per " + k.period + " (configured)" : "configured";
      if (k.limit) lim = num(k.limit) + " per " + k.period + " learned, " + num(k.configured_limit) + " configured";
      tr.appendChild(el("td", null, lim));
      tb.appendChild(tr);
    }
  }

  function apply(st) {
    last = st;
    mergeHistory(st.history);
    renderFacts(st);
    renderPool(st);
    renderHistory();
    renderClasses(st);
    renderTalkers(st);
    renderThrottleKeys(st);
    renderRefusals(st);
    renderDoors(st);
    document.body.dataset.updated = st.now;
    lastMsgAt = Date.now();
  }

  function clock(iso) {
    const d = new Date(iso);
    return isNaN(d) ? "" : d.toLocaleTimeString("en-GB", { hour12: false });
  }

  // A feed that went quiet is shown as such, whatever the transport says.
  setInterval(() => {
    if (lastMsgAt && Date.now() - lastMsgAt > STALE_MS) {
      setLive("down", "no data for " + dur((Date.now() - lastMsgAt) / 1000));
    }
  }, 1000);

  function poll() {
    if (pollTimer) return;
    const tick = () => {
      fetch("status.json", { cache: "no-store" })
        .then((r) => {
          if (!r.ok) throw new Error(r.status);
          return r.json();
        })
        .then((st) => {
          apply(st);
          setLive("polling", "polling · " + clock(st.now));
        })
        .catch(() => setLive("down", "no answer"));
    };
    tick();
    pollTimer = setInterval(tick, POLL_MS);
  }

  function connect() {
    if (!window.EventSource) {
      poll();
      return;
    }
    const es = new EventSource("events");
    es.addEventListener("status", (e) => {
      try {
        const st = JSON.parse(e.data);
        apply(st);
        setLive("live", "live · " + clock(st.now));
      } catch (err) {
        setLive("down", "bad data");
      }
    });
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        poll(); // refused (too many streams) or not a stream: poll instead
      } else {
        setLive("wait", "reconnecting…"); // EventSource retries by itself
      }
    };
  }

  window.addEventListener("resize", () => {
    if (last) renderHistory();
  });
  // The server put its newest sample in the page: draw all of it now,
  // then go live.
  try {
    const init = document.body.dataset.initial;
    if (init) {
      const st = JSON.parse(init);
      apply(st);
      setLive("connecting", "snapshot · " + clock(st.now) + " · connecting…");
    }
  } catch (err) {
    setLive("down", "bad data");
  }
  connect();
})();
