// The chat page of `hubzoo serve`: conversations kept in localStorage, answers
// streamed from /v1/chat/completions (server-sent events read from fetch),
// per-message stop / regenerate / edit / copy, per-conversation settings, the
// API key asked on a 401 and kept in sessionStorage, errors and recovery.
"use strict";

const $ = (id) => document.getElementById(id);
const R = HubzooRender;
const STORE = "hubzoo.conversations", CURRENT = "hubzoo.current", KEY = "hubzoo.apiKey", THEME = "hubzoo.theme";
const SETTINGS = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"];
const MAX_IMPORT_BYTES = 20 << 20;
const TOP_LOGPROBS = 5;  // alternatives shown per token when token probabilities are on

const state = {
  conversations: [],  // [{id, title, created, system, settings, messages: [{role, content, ...}]}]
  current: null,      // the shown conversation's id
  controller: null,   // the running request's AbortController
  modelId: null,
  healthTimer: null,
};

// ---- storage ---------------------------------------------------------------

function load() {
  try {
    const list = JSON.parse(localStorage.getItem(STORE) || "[]");
    state.conversations = Array.isArray(list) ? list.filter(validConversation) : [];
  } catch (e) {
    state.conversations = [];
  }
  state.current = localStorage.getItem(CURRENT);
  if (!conversation()) state.current = state.conversations[0]?.id ?? null;
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(state.conversations));
    if (state.current) localStorage.setItem(CURRENT, state.current);
  } catch (e) {
    showBanner("Could not save the conversations in this browser: " + e.message);
  }
}

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

function conversation() {
  return state.conversations.find((c) => c.id === state.current) || null;
}

// A new conversation starts with the system prompt and settings shown now.
function createConversation() {
  const c = { id: newId(), title: "New chat", created: Date.now(), system: "", settings: {}, messages: [] };
  readSettings(c);
  state.conversations.unshift(c);
  state.current = c.id;
  save();
  return c;
}

function validMessage(m) {
  return m && typeof m === "object" && ["system", "user", "assistant", "tool"].includes(m.role) &&
    (m.content == null || typeof m.content === "string") &&
    (m.tool_calls == null || Array.isArray(m.tool_calls));
}

function validConversation(c) {
  return c && typeof c === "object" && typeof c.id === "string" && Array.isArray(c.messages) &&
    c.messages.every(validMessage);
}

// ---- the side list -----------------------------------------------------------

function renderSidebar() {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of state.conversations) {
    const li = document.createElement("li");
    if (c.id === state.current) li.className = "current";
    const open = R.button(c.title || "Untitled", "Open: " + (c.title || "Untitled"), () => switchTo(c.id));
    open.className = "open";
    if (c.id === state.current) open.setAttribute("aria-current", "true");
    const rename = R.button("\u270e", "Rename: " + c.title, () => {
      const title = prompt("Name of this conversation", c.title);
      if (title && title.trim()) { c.title = title.trim().slice(0, 200); save(); renderSidebar(); }
    });
    const del = R.button("\u2715", "Delete: " + c.title, () => {
      if (!confirm(`Delete "${c.title}"?`)) return;
      state.conversations = state.conversations.filter((x) => x !== c);
      if (state.current === c.id) state.current = state.conversations[0]?.id ?? null;
      save();
      showConversation();
    });
    li.append(open, rename, del);
    ul.append(li);
  }
}

function switchTo(id) {
  if (state.controller) state.controller.abort();
  state.current = id;
  save();
  showConversation();
  if (matchMedia("(max-width: 760px)").matches) toggleSidebar(false);
}

function toggleSidebar(open) {
  document.body.classList.toggle("sidebar-open", open);
  $("menu").setAttribute("aria-expanded", String(open));
}

// ---- the conversation --------------------------------------------------------

function showConversation() {
  renderSidebar();
  const c = conversation();
  $("log").replaceChildren();
  if (!c) {
    $("log").append(Object.assign(document.createElement("p"), { className: "empty", textContent: "Start a conversation below." }));
  } else {
    c.messages.forEach((m, i) => $("log").append(messageView(c, m, i)));
  }
  $("system").value = c?.system ?? "";
  for (const k of SETTINGS) $(k).value = c?.settings?.[k] ?? "";
  $("logprobs").checked = !!c?.settings?.logprobs;
  scrollDown();
}

function scrollDown() {
  const log = $("log");
  log.scrollTop = log.scrollHeight;
}

const ROLE_NAMES = { user: "You", assistant: "Assistant", tool: "Tool", system: "System" };

function messageView(c, m, i) {
  const div = document.createElement("article");
  div.className = `msg ${m.role}` + (m.done === false ? " streaming" : " done");
  div.setAttribute("aria-label", ROLE_NAMES[m.role] || m.role);
  const who = Object.assign(document.createElement("div"), { className: "who", textContent: ROLE_NAMES[m.role] || m.role });
  div.append(who, R.messageBody(m));
  if (m.stats) div.append(Object.assign(document.createElement("div"), { className: "stats", textContent: m.stats }));
  if (m.done !== false) {
    div.append(actions(c, m, i));
  } else {  // streaming: its own Stop (as the form's, and Esc)
    div.setAttribute("aria-busy", "true");
    const bar = document.createElement("div");
    bar.className = "actions";
    bar.append(R.button("Stop", "Stop this answer", stop));
    div.append(bar);
  }
  return div;
}

function actions(c, m, i) {
  const bar = document.createElement("div");
  bar.className = "actions";
  bar.append(R.button("Copy", "Copy this message", () => R.copyText(m.content || "")));
  if (m.role === "user") bar.append(R.button("Edit", "Edit and resend from here", () => editMessage(c, i)));
  if (m.role === "assistant") bar.append(R.button("Regenerate", "Regenerate this answer", () => regenerate(c, i)));
  return bar;
}

function editMessage(c, i) {
  if (state.controller) return;
  const view = $("log").children[i];
  const area = Object.assign(document.createElement("textarea"), { value: c.messages[i].content || "", className: "edit" });
  area.setAttribute("aria-label", "Edited message");
  const send = R.button("Send", "Send the edited message", () => {
    const text = area.value.trim();
    if (!text) return;
    c.messages = c.messages.slice(0, i).concat([{ role: "user", content: text }]);
    save();
    showConversation();
    generate(c);
  });
  send.classList.add("primary");
  const cancel = R.button("Cancel", "Cancel the edit", showConversation);
  area.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); send.click(); }
    if (ev.key === "Escape") cancel.click();
  });
  const row = document.createElement("div");
  row.className = "actions";
  row.append(send, cancel);
  view.replaceChildren(area, row);
  area.focus();
}

function regenerate(c, i) {
  if (state.controller) return;
  c.messages = c.messages.slice(0, i);
  save();
  showConversation();
  generate(c);
}

// ---- the request ---------------------------------------------------------------

function number(id, integer) {
  const raw = $(id).value.trim();
  if (raw === "") return undefined;
  const v = Number(raw);
  if (!Number.isFinite(v)) return undefined;
  return integer ? Math.round(v) : v;
}

function readSettings(c) {
  c.system = $("system").value;
  c.settings = {};
  for (const k of SETTINGS) {
    const v = number(k, ["top_k", "max_tokens", "seed"].includes(k));
    if (v !== undefined) c.settings[k] = v;
  }
  if ($("logprobs").checked) Object.assign(c.settings, { logprobs: true, top_logprobs: TOP_LOGPROBS });
}

// What the server gets: the system prompt, then each message as the API has it.
function requestBody(c) {
  const messages = c.system.trim() ? [{ role: "system", content: c.system.trim() }] : [];
  for (const m of c.messages) {
    const out = { role: m.role, content: m.content ?? "" };
    if (m.role === "assistant") out.content = R.splitReasoning(m.content || "").answer;
    if (m.tool_calls) out.tool_calls = m.tool_calls;
    if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
    if (m.name) out.name = m.name;
    messages.push(out);
  }
  return { model: state.modelId || undefined, messages, stream: true,
           stream_options: { include_usage: true }, ...c.settings };
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

class HttpError extends Error {
  constructor(status, message, code, retryAfter) {
    super(message);
    Object.assign(this, { status, code, retryAfter });
  }
}

async function httpError(r) {
  let message = `${r.status} ${r.statusText}`, code = "";
  try {
    const j = await r.json();
    if (j.error) { message = j.error.message || message; code = j.error.code || ""; }
  } catch (e) { /* not JSON */ }
  return new HttpError(r.status, message, code, Number(r.headers.get("Retry-After")) || 0);
}

// Reads server-sent events from a fetch body; calls onData for each data line.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ") && onData(line.slice(6)) === false) return;
      }
    }
  }
}

// Folds one streamed chunk into the message: content, reasoning, tool calls, usage.
function applyChunk(m, j, run) {
  if (j.error) throw new HttpError(500, j.error.message, j.error.code || "");
  if (j.usage) run.usage = j.usage;
  for (const ch of j.choices || []) {
    const d = ch.delta || {};
    if (d.content) { m.content += d.content; run.first ??= performance.now(); }
    if (d.reasoning_content) { m.reasoning_content = (m.reasoning_content || "") + d.reasoning_content; run.first ??= performance.now(); }
    for (const t of d.tool_calls || []) {
      m.tool_calls ??= [];
      const call = (m.tool_calls[t.index ?? 0] ??= { id: t.id, type: "function", function: { name: "", arguments: "" } });
      if (t.id) call.id = t.id;
      if (t.function?.name) call.function.name += t.function.name;
      if (t.function?.arguments) call.function.arguments += t.function.arguments;
    }
    for (const t of ch.logprobs?.content || []) {  // {token, logprob, top_logprobs: [{token, logprob}]}
      (m.logprobs ??= []).push({ token: t.token, logprob: t.logprob,
        top: (t.top_logprobs || []).map((a) => ({ token: a.token, logprob: a.logprob })) });
    }
    if (ch.finish_reason) run.finish = ch.finish_reason;
  }
}

function statsLine(run, end) {
  const u = run.usage;
  const parts = [];
  if (u) {
    parts.push(`${u.completion_tokens} tokens`);
    const gen = (end - (run.first ?? end)) / 1000;
    if (u.completion_tokens > 1 && gen > 0) parts.push(`${((u.completion_tokens - 1) / gen).toFixed(1)} tokens/s`);
    parts.push(`prompt ${u.prompt_tokens} tokens`);
  }
  if (run.first) parts.push(`first token after ${((run.first - run.start) / 1000).toFixed(2)} s`);
  if (run.finish) parts.push(`finish: ${run.finish}`);
  return parts.join(" \u00b7 ");
}

// Streams an answer to the conversation's messages; the answer is appended as it comes.
async function generate(c) {
  if (conversation() !== c) {  // a Retry after switching: back to its conversation
    state.current = c.id;
    showConversation();
  }
  readSettings(c);
  const body = JSON.stringify(requestBody(c));  // the history before this answer
  const m = { role: "assistant", content: "", done: false };
  c.messages.push(m);
  const view = messageView(c, m, c.messages.length - 1);
  $("log").querySelector(".empty")?.remove();
  $("log").append(view);
  scrollDown();
  const run = { start: performance.now(), first: null, usage: null, finish: null };
  state.controller = new AbortController();
  setBusy(true);
  let pending = false;
  const repaint = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const log = $("log");
      const following = log.scrollHeight - log.scrollTop - log.clientHeight < 48;  // not scrolled up to read
      const open = view.querySelector("details.reasoning")?.open;  // kept as the user left it
      const fresh = R.messageBody(m);
      if (open) fresh.querySelector("details.reasoning").open = true;
      view.querySelector(".body").replaceWith(fresh);
      if (following) scrollDown();
    });
  };
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(),
      body, signal: state.controller.signal });
    if (!r.ok) throw await httpError(r);
    await readEvents(r, (data) => {
      if (data === "[DONE]") return false;
      applyChunk(m, JSON.parse(data), run);
      repaint();
    });
    m.stats = statsLine(run, performance.now());
    hideBanner();
  } catch (e) {
    if (e.name === "AbortError") {
      m.stats = statsLine(run, performance.now()) + " \u00b7 stopped";  // the text so far is kept
    } else {
      c.messages.pop();
      failed(e, () => generate(c));
    }
  } finally {
    m.done = true;
    state.controller = null;
    setBusy(false);
    save();
    if (conversation() === c) showConversation();
  }
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  document.body.classList.toggle("busy", busy);
}

// ---- errors, the API key, recovery ---------------------------------------------

function showBanner(text, retry) {
  $("banner-text").textContent = text;
  $("banner").hidden = false;
  $("retry").hidden = !retry;
  $("retry").onclick = retry ? () => { hideBanner(); retry(); } : null;
}

function hideBanner() {
  $("banner").hidden = true;
  stopHealthWatch();  // nothing left to report: a retry or a later answer went through
}

function stopHealthWatch() {
  clearInterval(state.healthTimer);
  state.healthTimer = null;
}

function failed(e, retry) {
  if (e instanceof HttpError && e.status === 401) {
    askKey(e.message).then((ok) => { if (ok) retry(); });
    return;
  }
  if (!(e instanceof HttpError)) {
    showBanner("The server cannot be reached (is `hubzoo serve` running?). Waiting for it to come back\u2026", retry);
    watchHealth(retry);
    return;
  }
  if (e.status === 429) {
    showBanner(`The server is busy (429): ${e.message} Try again` + (e.retryAfter ? ` in ${e.retryAfter} s.` : "."), retry);
  } else if (e.code === "context_length_exceeded") {
    showBanner(`The conversation is too long for the model's context: ${e.message} ` +
               "Start a new chat, delete earlier turns (edit one), or lower Max tokens.", retry);
  } else {
    showBanner(`Error ${e.status}: ${e.message}`, retry);
  }
}

// Polls /health until the server answers again, then says so (the retry stays offered).
function watchHealth(retry) {
  if (state.healthTimer) return;
  const timer = setInterval(async () => {
    try {
      const r = await fetch("/health", { cache: "no-store" });
      if (!r.ok) return;
    } catch (e) {
      return;
    }
    // A poll still in flight when the banner was dismissed (a retry went through) says nothing.
    if (state.healthTimer !== timer) return;
    stopHealthWatch();
    showBanner("The server is back.", retry);
    loadModels();
  }, 1000);
  state.healthTimer = timer;
}

let keyWaiters = null;

// Shows the key dialog (once, however many requests need it); resolves to whether a key was given.
function askKey(reason) {
  if (keyWaiters) return new Promise((resolve) => keyWaiters.push(resolve));
  keyWaiters = [];
  const dialog = $("key-dialog");
  $("key-why").textContent = (sessionStorage.getItem(KEY) ? "The key was refused: " : "This server needs an API key: ") +
    reason + " It is kept in this browser tab only.";
  $("key-input").value = "";
  dialog.showModal();
  return new Promise((resolve) => {
    const finish = (ok) => {
      dialog.close();
      const waiters = keyWaiters;
      keyWaiters = null;
      resolve(ok);
      waiters.forEach((w) => w(ok));
    };
    $("key-form").onsubmit = (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY, $("key-input").value.trim());
      finish(true);
    };
    $("key-cancel").onclick = () => finish(false);
    dialog.oncancel = () => finish(false);
  });
}

async function loadModels() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    if (!r.ok) throw await httpError(r);
    const j = await r.json();
    state.modelId = j.data[0].id;
    $("model").textContent = `${state.modelId} (context ${j.data[0].max_model_len || "?"} tokens)`;
  } catch (e) {
    $("model").textContent = "model list unavailable";
    failed(e, loadModels);
  }
}

// ---- export / import -------------------------------------------------------------

function exportAll() {
  const data = { format: "hubzoo-chat", version: 1, conversations: state.conversations };
  const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" }));
  const a = Object.assign(document.createElement("a"), { href: url, download: "hubzoo-conversations.json" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// Accepts our export, a list of conversations, one conversation, or {messages: [...]}.
function importText(text) {
  const data = JSON.parse(text);
  let list = Array.isArray(data) ? data : data.conversations ?? [data];
  if (!Array.isArray(list)) throw new Error("no conversations in this file");
  list = list.map((c) => ({ id: newId(), title: String(c.title || "Imported chat").slice(0, 200),
    created: Number(c.created) || Date.now(), system: typeof c.system === "string" ? c.system : "",
    settings: c.settings && typeof c.settings === "object" ? c.settings : {},
    messages: Array.isArray(c.messages) ? c.messages.map((m) => (m && typeof m === "object" ? { ...m, done: undefined } : m)) : null }));
  const bad = list.findIndex((c) => !validConversation(c));
  if (bad >= 0) throw new Error(`conversation ${bad + 1}: messages must be [{role, content}] with a known role`);
  for (const c of list) c.settings = Object.fromEntries(Object.entries(c.settings)
    .filter(([k, v]) => (SETTINGS.includes(k) && typeof v === "number" && Number.isFinite(v)) ||
                        (k === "logprobs" && v === true) || (k === "top_logprobs" && v === TOP_LOGPROBS)));
  state.conversations.unshift(...list);
  state.current = list[0]?.id ?? state.current;
  save();
  showConversation();
  return list.length;
}

async function importFile(file) {
  try {
    if (file.size > MAX_IMPORT_BYTES) throw new Error(`the file is over ${MAX_IMPORT_BYTES >> 20} MiB`);
    importText(await file.text());
    hideBanner();
  } catch (e) {
    showBanner("Import failed: " + e.message);
  }
}

// ---- theme ----------------------------------------------------------------------

function applyTheme() {
  const choice = localStorage.getItem(THEME) || "auto";
  if (choice === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = choice;
  const dark = choice === "dark" || (choice === "auto" && matchMedia("(prefers-color-scheme: dark)").matches);
  $("hljs-light").disabled = dark;
  $("hljs-dark").disabled = !dark;
  $("theme").textContent = { auto: "\u25d0", light: "\u263c", dark: "\u263e" }[choice];
  $("theme").title = `Theme: ${choice} (light, dark, or as the system)`;
  $("theme").setAttribute("aria-label", "Theme: " + choice);
}

function cycleTheme() {
  const order = ["auto", "light", "dark"];
  const next = order[(order.indexOf(localStorage.getItem(THEME) || "auto") + 1) % 3];
  localStorage.setItem(THEME, next);
  applyTheme();
}

// ---- wiring ---------------------------------------------------------------------

function send() {
  const text = $("input").value.trim();
  if (!text || state.controller) return;
  const c = conversation() || createConversation();
  if (!c.messages.length) c.title = text.replace(/\s+/g, " ").slice(0, 60);
  c.messages.push({ role: "user", content: text });
  $("input").value = "";
  save();
  showConversation();
  generate(c);
}

function stop() {
  if (state.controller) state.controller.abort();
}

function wire() {
  $("form").addEventListener("submit", (ev) => { ev.preventDefault(); send(); });
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); send(); }
  });
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && state.controller) stop(); });
  $("stop").addEventListener("click", stop);
  $("new").addEventListener("click", () => { switchTo(createConversation().id); $("input").focus(); });
  $("menu").addEventListener("click", () => toggleSidebar(!document.body.classList.contains("sidebar-open")));
  $("settings-toggle").addEventListener("click", () => {
    const open = $("settings").hidden;
    $("settings").hidden = !open;
    $("settings-toggle").setAttribute("aria-expanded", String(open));
  });
  for (const id of ["system", "logprobs", ...SETTINGS]) {
    $(id).addEventListener("change", () => { const c = conversation(); if (c) { readSettings(c); save(); } });
  }
  $("forget-key").addEventListener("click", () => sessionStorage.removeItem(KEY));
  $("theme").addEventListener("click", cycleTheme);
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
  $("export").addEventListener("click", exportAll);
  $("import").addEventListener("click", () => $("import-file").click());
  $("import-file").addEventListener("change", (ev) => {
    if (ev.target.files[0]) importFile(ev.target.files[0]);
    ev.target.value = "";
  });
  window.addEventListener("storage", (ev) => { if (ev.key === STORE && !state.controller) { load(); showConversation(); } });
}

applyTheme();
load();
wire();
showConversation();
loadModels();
