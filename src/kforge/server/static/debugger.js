// The debugger: a machine in a debug session, stepped and run through /v1/debug.
"use strict";

(async () => {
  const { api, el, short } = kforge;
  if (!kforge.requireToken(document.getElementById("main"))) return;
  const $ = (id) => document.getElementById(id);
  let session = null;
  let view = null;
  let memoryAddress = 0;
  let program = null;  // hex FRGP from an uploaded file, else null
  let fileName = "main.star";  // what Starlark source is called in positions
  let files = {};  // the session's source text, by file name

  try {
    const me = await api("GET", "/v1/whoami");
    $("who").textContent = (me.operator ? "operator " : "agent ") + short(me.agent);
  } catch (error) {
    $("who").textContent = "token refused: " + error.message;
    return;
  }

  $("file").addEventListener("change", async () => {
    const file = $("file").files[0];
    if (!file) return;
    const bytes = new Uint8Array(await file.arrayBuffer());
    const isFrgp = bytes.length >= 4 && String.fromCharCode(...bytes.slice(0, 4)) === "FRGP";
    if (isFrgp) {
      program = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
      $("source").value = `; ${file.name}: FRGP bytes (${bytes.length})`;
    } else {
      program = null;
      $("source").value = new TextDecoder().decode(bytes);
      $("language").value = file.name.endsWith(".star") ? "starlark" : "assembly";
      if (file.name.endsWith(".star")) fileName = file.name;
    }
  });

  function hexOf(text) {
    return Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  async function call(method, path, body) {
    $("run-error").textContent = "";
    try {
      view = await api(method, `/v1/debug/${session}${path}?memory_address=${memoryAddress}&memory_length=128`, body);
      render();
    } catch (error) {
      $("run-error").textContent = error.message;
    }
  }

  $("load").addEventListener("click", async () => {
    $("load-error").textContent = "";
    const body = { tick_budget: Number($("budget").value), input_hex: hexOf($("input").value) };
    if (program) body.program_hex = program;
    else if ($("language").value === "starlark") {
      body.starlark = $("source").value;
      body.filename = fileName;
      body.memory_quota = 1 << 20;
    } else body.assembly = $("source").value;
    try {
      if (session) await api("DELETE", "/v1/debug/" + session).catch(() => {});
      view = await api("POST", "/v1/debug", body);
      session = view.session_id;
      files = (await api("GET", `/v1/debug/${session}/files`)).files;
      $("session-panel").hidden = false;
      render();
    } catch (error) {
      $("load-error").textContent = error.message;
    }
  });

  const n = () => Math.max(1, Number($("n").value) || 1);
  $("step").addEventListener("click", () => call("POST", "/step", { count: 1 }));
  $("step-over").addEventListener("click", () => call("POST", "/step_over", {}));
  $("step-out").addEventListener("click", () => call("POST", "/step_out", {}));
  $("step-line").addEventListener("click", () => call("POST", "/step_line", {}));
  $("step-n").addEventListener("click", () => call("POST", "/step", { count: n() }));
  $("run").addEventListener("click", () => call("POST", "/run", { max_ticks: 10000000 }));
  $("run-n").addEventListener("click", () => call("POST", "/run", { max_ticks: n(), breakpoints: [] }));
  $("mem-go").addEventListener("click", () => {
    memoryAddress = Math.max(0, Number($("mem-address").value) || 0);
    call("GET", "");
  });

  function toggleBreakpoint(index) {
    const set = new Set(view.breakpoints);
    if (set.has(index)) set.delete(index); else set.add(index);
    call("PUT", "/breakpoints", { breakpoints: [...set] });
  }

  // "file:line:col" of a source location, with its function when known.
  function located(source) {
    const where = `${source.file}:${source.line}:${source.column}`;
    return source.function ? `${source.function} (${where})` : where;
  }

  // The label the pc is under (the nearest at or before it), as "in name+offset".
  function whereIs(pc) {
    if (view.source) return "in " + located(view.source);
    let best = -1;
    for (const key of Object.keys(view.labels)) {
      const index = Number(key);
      if (index <= pc && index > best) best = index;
    }
    if (best < 0) return "";
    return `in ${view.labels[best][0]}` + (pc > best ? `+${pc - best}` : "");
  }

  // The source file the pc is in, its current line marked (Starlark sessions only).
  function renderSource() {
    const name = view.source ? view.source.file : Object.keys(files)[0];
    const text = name !== undefined ? files[name] : undefined;
    $("source-panel").hidden = text === undefined;
    if (text === undefined) return;
    $("source-name").textContent = name;
    const current = view.source && view.source.file === name ? view.source.line : 0;
    const rows = text.split("\n").map((line, index) => el("div", { class: index + 1 === current ? "pc" : "" },
      `${String(index + 1).padStart(4)}  ${line}`));
    $("source-lines").replaceChildren(...rows);
    rows[current - 1]?.scrollIntoView({ block: "nearest" });
  }

  function render() {
    renderSource();
    $("state").replaceChildren(kforge.badge(view.state));
    $("stop").textContent = view.last_stop + (view.fault ? ` (${view.fault})` : "");
    $("pc").textContent = view.pc;
    $("where").textContent = whereIs(view.pc);
    $("ticks").textContent = `${view.ticks_used} / ${view.tick_budget}`;
    const breakpoints = new Set(view.breakpoints);
    const listing = [];
    const lines = view.code.map((line, index) => {
      for (const name of view.labels[index] || []) listing.push(el("div", { class: "label" }, `${name}:`));
      const source = view.sources && view.sources[index];
      const row = el("div", {
        class: (index === view.pc ? "pc " : "") + (breakpoints.has(index) ? "bp" : ""),
        "data-index": index, onclick: () => toggleBreakpoint(index),
      }, `${String(index).padStart(4)}  ${line.padEnd(28)}`, source ? el("span", { class: "dim" }, located(source)) : "");
      listing.push(row);
      return row;
    });
    $("code").replaceChildren(...listing);
    lines[view.pc]?.scrollIntoView({ block: "nearest" });
    const changed = new Set(view.changed);
    const shown = view.registers.map((value, index) => [index, value])
      .filter(([index, value]) => index < 16 || value !== "0x0" || changed.has(index));
    $("registers").replaceChildren(...shown.map(([index, value]) =>
      el("div", { class: changed.has(index) ? "changed" : "", id: "r" + index }, `r${index} = ${value}`)));
    $("flags").textContent = Object.entries(view.flags).map(([name, on]) => `${name}=${on ? 1 : 0}`).join("  ");
    $("stack").textContent = view.stack.map((entry) => `${entry.address.toString(16).padStart(6, "0")}: ${entry.value}`).join("\n") || "(empty)";
    const data = view.memory.data_hex.match(/../g) || [];
    const rows = [];
    for (let at = 0; at < data.length; at += 16) {
      const chunk = data.slice(at, at + 16);
      const ascii = chunk.map((h) => { const c = parseInt(h, 16); return c >= 32 && c < 127 ? String.fromCharCode(c) : "."; }).join("");
      rows.push(`${(view.memory.address + at).toString(16).padStart(6, "0")}  ${chunk.join(" ").padEnd(47)}  ${ascii}`);
    }
    $("memory").textContent = rows.join("\n");
    const inbound = view.inbound.map(({ channel, messages_hex: queue, count }) => `in  ${channel}: ${count} queued ${queue.map((q) => JSON.stringify(kforge.text(q))).join(" ")}`);
    const outbound = view.outbound.map((m) => `out ${m.channel}: ${JSON.stringify(kforge.text(m.data_hex))}`);
    $("channels").textContent = [...inbound, ...outbound].join("\n") || "(no queued messages)";
    const cut = view.stdout_length > view.stdout_hex.length / 2 ? "…" : "";
    $("stdout").textContent = cut + kforge.text(view.stdout_hex) || "(empty)";
  }
})();
