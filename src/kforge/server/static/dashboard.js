// The sandbox list, the live event stream and the services view.
"use strict";

(async () => {
  const { api, events, short, el, badge, bar } = kforge;
  if (!kforge.requireToken(document.getElementById("main"))) return;
  let me;
  try {
    me = await api("GET", "/v1/whoami");
  } catch (error) {
    document.getElementById("who").textContent = "token refused: " + error.message;
    sessionStorage.removeItem("kforge.token");
    return;
  }
  document.getElementById("who").textContent = (me.operator ? "operator " : "agent ") + short(me.agent);
  const listPath = me.operator ? "/v1/sandboxes?all=true" : "/v1/sandboxes";
  const body = document.querySelector("#sandboxes tbody");

  // The program: its name when the upload gave one, else its short id.
  function program(s) {
    if (!s.program_id) return el("span", { class: "dim" }, "—");
    return s.program_name
      ? el("span", { title: s.program_id }, s.program_name)
      : el("span", { class: "mono dim", title: s.program_id }, short(s.program_id));
  }

  // When it was created: the time today, the date and time before.
  function created(ms) {
    if (ms === null || ms === undefined) return el("span", { class: "dim" }, "—");
    const when = new Date(ms);
    const today = when.toDateString() === new Date().toDateString();
    return el("span", { title: when.toISOString() },
      today ? when.toLocaleTimeString() : when.toLocaleString());
  }

  function fault(s) {
    if (!s.fault) return "";
    return el("span", { class: "error" }, s.fault + (s.fault_detail !== null && s.fault_detail !== undefined ? ` ${s.fault_detail}` : ""));
  }

  async function refresh() {
    const { sandboxes } = await api("GET", listPath);
    const rows = sandboxes.slice().reverse().map((s) => el("tr", { "data-id": s.id, "data-state": s.state },
      el("td", {}, el("a", { href: "sandbox.html?id=" + s.id, class: "mono" }, short(s.id))),
      el("td", { class: "program" }, program(s)),
      el("td", { class: "created" }, created(s.created_at_ms)),
      el("td", { class: "mono" }, short(s.owner)),
      el("td", {}, badge(s.state)),
      el("td", { class: "fault" }, fault(s)),
      el("td", {}, bar(s.ticks_used, s.tick_budget)),
      el("td", {}, bar(s.memory_used, s.memory_quota))));
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 8, class: "empty" }, "no sandboxes yet"))]));
    const live = sandboxes.filter((s) => ["READY", "RUNNING", "BLOCKED"].includes(s.state)).length;
    document.getElementById("counts").textContent = `${sandboxes.length} kept, ${live} live`;
  }

  async function refreshServices() {
    const { supported, services } = await api("GET", "/v1/services");
    const panel = document.getElementById("services-panel");
    panel.hidden = !supported;
    if (!supported) return;
    const rows = services.map((s) => el("tr", {},
      el("td", { class: "mono" }, short(s.id)),
      el("td", {}, kforge.text(s.name_hex)),
      el("td", { class: "mono" }, short(s.owner)),
      el("td", {}, badge(String(s.state))),
      el("td", {}, (s.endpoints || []).map((e) => kforge.text(e.name_hex) + "@" + e.channel).join(", ")),
      el("td", {}, `${s.calls_completed ?? 0} done, ${s.calls_queued ?? 0} queued`)));
    document.querySelector("#services tbody").replaceChildren(
      ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 6, class: "empty" }, "no services"))]));
  }

  const log = document.getElementById("events");
  let pending = false;
  events({}, (event) => {
    if (event.gap) {
      log.prepend(el("div", { class: "error" }, `… ${event.gap} events dropped`));
      return;
    }
    const time = new Date(event.timestamp_ms).toLocaleTimeString();
    const extra = event.payload.ticks_used !== undefined ? ` ticks=${event.payload.ticks_used}` : "";
    const fault = event.payload.fault_name ? ` ${event.payload.fault_name}` : "";
    log.prepend(el("div", {}, el("span", { class: "dim" }, `#${event.seq} ${time} `),
      el("span", { class: "kind" }, event.kind_name), ` ${short(event.sandbox_id)}${extra}${fault}`));
    while (log.childElementCount > 300) log.lastChild.remove();
    if (!pending) {  // coalesce bursts of events into one refresh
      pending = true;
      setTimeout(() => { pending = false; refresh(); if (event.kind >= 0x4010) refreshServices(); }, 100);
    }
  }, (state) => { document.getElementById("stream-state").textContent = state; });

  await Promise.all([refresh(), refreshServices()]);
  setInterval(refresh, 1000);  // ticks move between events
  setInterval(refreshServices, 5000);
})();
