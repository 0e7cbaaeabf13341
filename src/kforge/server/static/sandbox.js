// One sandbox: its status, a chart of ticks over time, its output (followed while it
// runs) and its events.
"use strict";

(async () => {
  const { api, events, short, el, badge, bar } = kforge;
  if (!kforge.requireToken(document.getElementById("main"))) return;
  const id = new URLSearchParams(location.search).get("id");
  document.getElementById("title").textContent = "sandbox " + id;
  const started = Date.now();
  const points = [];
  let final = false;
  const LIVE = ["CREATED", "READY", "RUNNING", "BLOCKED"];

  // The output, read from GET …/output in order: each reply's bytes are appended
  // (non-printable bytes escaped) until a reply says the sandbox has stopped and
  // nothing is left.  Reads are chained so that two never run at once.
  const outputBox = document.getElementById("output");
  const output = { offset: 0, rest: new Uint8Array(0), done: false, chain: Promise.resolve() };

  function showOutput(data, last) {
    const joined = new Uint8Array(output.rest.length + data.length);
    joined.set(output.rest);
    joined.set(data, output.rest.length);
    const { nodes, rest } = kforge.printable(joined, last);
    output.rest = rest;
    if (nodes.length && outputBox.classList.contains("empty")) {
      outputBox.classList.remove("empty");
      outputBox.replaceChildren();
    }
    const follow = outputBox.scrollTop + outputBox.clientHeight >= outputBox.scrollHeight - 4;
    outputBox.append(...nodes);
    if (follow) outputBox.scrollTop = outputBox.scrollHeight;
    outputBox.dataset.offset = String(output.offset);
  }

  async function readOutput() {
    while (!output.done) {
      let reply;
      try {
        reply = await api("GET", `/v1/sandboxes/${id}/output?offset=${output.offset}`);
      } catch (error) {
        if (error.status === 403 || error.status === 404) output.done = true;
        document.getElementById("output-state").textContent = error.message;
        return;
      }
      output.offset = reply.next_offset;
      const caughtUp = reply.next_offset >= reply.length;
      const stopped = !LIVE.includes(reply.state);
      output.done = stopped && caughtUp;
      showOutput(kforge.bytes(reply.data_hex), output.done);
      document.getElementById("output-state").textContent =
        `${output.offset.toLocaleString()} bytes` + (output.done ? "" : " so far");
      if (caughtUp) return;  // else more than one reply's worth is waiting: read on
    }
  }

  function followOutput() {
    output.chain = output.chain.then(readOutput);
    return output.chain;
  }

  function drawChart() {
    const svg = document.getElementById("chart");
    const width = 520, height = 220, left = 50, bottom = 20;
    const maxT = Math.max(1, ...points.map((p) => p.t));
    const maxY = Math.max(1, ...points.map((p) => p.ticks));
    const x = (t) => left + ((width - left - 10) * t) / maxT;
    const y = (v) => height - bottom - ((height - bottom - 10) * v) / maxY;
    const path = points.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p.ticks).toFixed(1)}`).join(" ");
    svg.innerHTML =
      `<line class="axis" x1="${left}" y1="${height - bottom}" x2="${width}" y2="${height - bottom}"/>` +
      `<line class="axis" x1="${left}" y1="0" x2="${left}" y2="${height - bottom}"/>` +
      `<text x="2" y="12">${maxY.toLocaleString()}</text><text x="2" y="${height - bottom}">0</text>` +
      `<text x="${width - 40}" y="${height - 4}">${(maxT / 1000).toFixed(1)} s</text>` +
      `<path class="line" d="${path}"/>` +
      (points.length ? `<circle cx="${x(points.at(-1).t).toFixed(1)}" cy="${y(points.at(-1).ticks).toFixed(1)}" r="4" fill="#4fa3e0"/>` : "");
  }

  async function poll() {
    let info;
    try {
      info = await api("GET", "/v1/sandboxes/" + id);
    } catch (error) {
      document.querySelector("#status tbody").replaceChildren(el("tr", {}, el("td", { class: "error" }, error.message)));
      return;
    }
    points.push({ t: Date.now() - started, ticks: info.ticks_used });
    drawChart();
    const rows = [
      ["state", badge(info.state)],
      ["owner", el("span", { class: "mono" }, info.owner)],
      ["ticks", bar(info.ticks_used, info.tick_budget)],
      ["memory", bar(info.memory_used, info.memory_quota)],
      ["persistent", String(info.persistent)],
      ["blocked on", info.blocked_channel === null ? "—" : "channel " + info.blocked_channel],
    ];
    document.querySelector("#status tbody").replaceChildren(
      ...rows.map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", { id: "status-" + name.replace(" ", "-") }, value))));
    if (final) return;  // the output is complete, or being completed by an earlier poll
    const stopped = !LIVE.includes(info.state);
    if (stopped) final = true;
    await followOutput();
    if (stopped) {
      const result = await api("GET", `/v1/sandboxes/${id}/wait?timeout=0`);
      if (outputBox.classList.contains("empty")) outputBox.textContent = "(no output)";
      if (result.fault !== null) outputBox.append(el("span", { class: "esc" }, `\n[fault ${result.fault}]`));
      outputBox.dataset.final = info.state;
    }
  }

  const log = document.getElementById("events");
  events({ sandbox: id }, (event) => {
    if (event.gap) return;
    log.prepend(el("div", {}, el("span", { class: "dim" }, `#${event.seq} `), el("span", { class: "kind" }, event.kind_name),
      " " + JSON.stringify(event.payload)));
    poll();
  });
  await poll();
  const timer = setInterval(() => { if (final) clearInterval(timer); else poll(); }, 250);
})();
