// Shared by every dashboard page: the token, API calls, the event socket, small helpers.
"use strict";

const kforge = (() => {
  const KEY = "kforge.token";
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem(KEY, fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }

  function token() { return sessionStorage.getItem(KEY); }

  function setToken(value) { sessionStorage.setItem(KEY, value.trim()); location.reload(); }

  async function api(method, path, body) {
    const options = { method, headers: { "Authorization": "Bearer " + token(), "Accept": "application/json" } };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(path, options);
    const data = response.headers.get("content-type")?.includes("json") ? await response.json() : {};
    if (!response.ok) {
      const error = new Error(data.error ? data.error.message : response.statusText);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function events(query, onEvent, onState) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const params = new URLSearchParams(query || {});
    params.set("token", token());
    let socket;
    let closed = false;
    let last = 0;  // after a reconnection, go on from the event after the last one seen
    function open() {
      if (last) params.set("since", String(last + 1));
      socket = new WebSocket(`${scheme}//${location.host}/v1/events?${params}`);
      socket.onopen = () => onState && onState("live");
      socket.onmessage = (message) => {
        const event = JSON.parse(message.data);
        if (event.seq) last = Math.max(last, event.seq);
        onEvent(event);
      };
      socket.onclose = (event) => {
        onState && onState(event.code === 4401 ? "refused" : "reconnecting");
        if (!closed && event.code !== 4401 && event.code !== 4403) setTimeout(open, 1000);
      };
    }
    open();
    return { close() { closed = true; socket.close(); } };
  }

  function short(hex) { return hex ? hex.slice(0, 8) + "…" : "—"; }

  function bytes(hex) {
    return new Uint8Array(hex ? hex.match(/../g).map((pair) => parseInt(pair, 16)) : []);
  }

  const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

  // Output bytes as nodes for a <pre>: printable text as it is (newlines and tabs
  // too), every other byte as a "\xNN" span of class "esc" (control characters,
  // bytes that are not UTF-8).  A UTF-8 sequence cut off at the end is returned
  // in "rest" to be put before the next chunk, unless "final".
  function printable(data, final) {
    const nodes = [];
    let run = "";
    const flush = () => { if (run) nodes.push(document.createTextNode(run)); run = ""; };
    const escape = (byte) => {
      flush();
      nodes.push(el("span", { class: "esc" }, "\\x" + byte.toString(16).padStart(2, "0")));
    };
    let i = 0;
    while (i < data.length) {
      const b = data[i];
      if (b === 0x09 || b === 0x0a || (b >= 0x20 && b < 0x7f)) { run += String.fromCharCode(b); i++; continue; }
      const size = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
      let tail = 1;
      while (size && tail < size && i + tail < data.length && (data[i + tail] & 0xc0) === 0x80) tail++;
      if (size && tail < size && i + tail === data.length && !final) {
        flush();
        return { nodes, rest: data.slice(i) };  // may complete in the next chunk
      }
      if (size && tail === size) {
        let char = null;
        try { char = strictUtf8.decode(data.subarray(i, i + size)); } catch { char = null; }
        if (char !== null && !/[\p{C}\p{Zl}\p{Zp}]/u.test(char)) { run += char; i += size; continue; }
      }
      escape(b);
      i++;
    }
    flush();
    return { nodes, rest: new Uint8Array(0) };
  }

  function text(hex) {
    if (!hex) return "";
    const bytes = new Uint8Array(hex.match(/../g).map((pair) => parseInt(pair, 16)));
    return new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  }

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value);
    }
    for (const child of children) node.append(child instanceof Node ? child : String(child));
    return node;
  }

  function badge(state) { return el("span", { class: "state state-" + state.toLowerCase() }, state); }

  function bar(used, total) {
    const share = total > 0 ? Math.min(100, (100 * used) / total) : 0;
    return el("div", { class: "bar", title: `${used} / ${total}` },
      el("div", { class: "fill", style: `width:${share.toFixed(1)}%` }),
      el("span", {}, `${used.toLocaleString()} / ${total.toLocaleString()}`));
  }

  function requireToken(container) {
    if (token()) return true;
    container.replaceChildren(el("div", { class: "panel" },
      el("h2", {}, "Sign in"),
      el("p", {}, "Paste the dev token that kforge serve printed, or a token from POST /v1/session."),
      el("input", { id: "token-input", placeholder: "kf1.…", size: "80" }),
      el("button", { onclick: () => setToken(document.getElementById("token-input").value) }, "Use token")));
    return false;
  }

  return { api, events, token, setToken, short, bytes, printable, text, el, badge, bar, requireToken };
})();
