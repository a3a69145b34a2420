// ReSpec sidebar tab for ComfyUI's frontend (1.35+): the editing session a graph works on —
// turn thumbnails with the user's and the sent instruction, the latest plan's restoration source
// and identity anchor, R_restore / R_preserve overlays on the latest image, the latest OCCUR
// scores — updated live from the nodes' websocket events; a chat-style composer that queues one turn
// through the frontend's own queue call; per-turn Undo to here / Branch from here / Regenerate.
//
// All decisions (which session, what to fetch, what is highlighted, geometry, which node carries the
// request, the pending turn's states, what an action does) are made by the pure functions of
// lib/respec_view.js and lib/respec_composer.js; this file only talks to ComfyUI and draws. The panel
// lives in a shadow root on the sidebar's element, so its stylesheet styles nothing else on the page.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import * as V from "./lib/respec_view.js";
import * as C from "./lib/respec_composer.js";

const TAB_ID = "respec-history";
const GRAPH_POLL_MS = 1500;
const LIST_MIN_INTERVAL_MS = 2000;
const CARD_MIN_WIDTH = 104;

let state = V.initialState();
let composer = C.initialComposer();
let composerNote = ""; // why the composer cannot send (no conversational graph, empty request, ...)
const views = new Set(); // mounted panels: {el, parts, cards: Map, drawn: string}
const inFlight = new Set(); // session ids being fetched
let listInFlight = false;
let lastListAt = 0;
let scheduled = false;
let pollTimer = null;

// --------------------------------------------------------------------------- state and server

function dispatch(action) {
  const next = V.reduce(state, action);
  if (next === state) return;
  state = next;
  schedule();
}

function dispatchComposer(action) {
  const next = C.reduceComposer(composer, action);
  if (next === composer) return;
  composer = next;
  schedule();
}

function schedule() {
  if (scheduled) return;
  scheduled = true;
  queueMicrotask(() => {
    scheduled = false;
    sync();
    for (const view of [...views]) {
      if (!view.el.isConnected) views.delete(view);
      else render(view);
    }
  });
}

async function getJson(path) {
  const res = await api.fetchApi(path);
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  if (!res.ok) throw new Error(body?.error ?? `${path}: HTTP ${res.status}`);
  return body;
}

function loadSessions(force = false) {
  const now = Date.now();
  if (listInFlight || (!force && now - lastListAt < LIST_MIN_INTERVAL_MS)) return;
  listInFlight = true;
  lastListAt = now;
  getJson("/respec/sessions")
    .then((body) => dispatch({ type: "sessions/loaded", sessions: body?.sessions ?? [] }))
    .catch((e) => dispatch({ type: "error", message: `Could not list sessions: ${e.message}` }))
    .finally(() => {
      listInFlight = false;
    });
}

function loadSession(sid) {
  if (inFlight.has(sid)) return;
  inFlight.add(sid);
  getJson(V.sessionPath(sid, state.stores[sid]))
    .then((data) => dispatch({ type: "session/loaded", data }))
    .catch((e) => {
      console.warn(`ReSpec: could not load session "${sid}": ${e.message}`);   // on record, as the panel says it
      dispatch({ type: "error", message: `Could not load session "${sid}": ${e.message}` });
    })
    .finally(() => {
      inFlight.delete(sid);
      schedule(); // a newer version may have been announced meanwhile
    });
}

function loadLatestScores() {
  getJson("/respec/scores/latest")
    .then((body) => body?.scores && !state.scores && dispatch({ type: "event/scores", data: body.scores }))
    .catch(() => {}); // scores are optional; the panel says "no scores yet"
}

/** Fetch what the state says is missing (only sessions the store is known to have). */
function sync() {
  if (views.size && V.sessionsOutdated(state)) loadSessions();
  const sid = V.sessionToFetch(state);
  if (sid) loadSession(sid);
}

function scanGraph() {
  const graph = app.rootGraph ?? app.graph;
  const nodes = graph?._nodes ?? graph?.nodes ?? [];
  dispatch({ type: "graph/changed", sessionIds: V.sessionIdsFromNodes(nodes) });
}

function listen() {
  api.addEventListener("respec.history", (e) => {
    dispatch({ type: "event/history", data: e.detail });
    dispatchComposer({ type: "history", data: e.detail });
    loadSessions(true);
  });
  api.addEventListener("respec.plan", (e) => dispatchComposer({ type: "plan", data: e.detail }));
  // The composer's own prompt: ComfyUI's events carry its prompt_id (others' are ignored).
  for (const name of ["execution_start", "executing", "progress", "execution_success", "execution_error",
    "execution_interrupted"]) {
    api.addEventListener(name, (e) => {
      if (e.detail && typeof e.detail === "object") dispatchComposer({ type: name, data: withNodeTitle(e.detail) });
    });
  }
  // Every event the pack's nodes send has a listener, so none is reported as unhandled.
  const actions = {
    "respec.plan": "event/plan",
    "respec.scores": "event/scores",
    "respec.judge": "event/judge",
    "respec.references": "event/references",
    "respec.editor_step": "event/editor-step",
    "respec.bench.row": "event/bench-row",
  };
  for (const [name, type] of Object.entries(actions)) {
    api.addEventListener(name, (e) => dispatch({ type, data: e.detail }));
  }
  api.addEventListener("execution_start", () => {
    scanGraph();
    dispatch({ type: "run/started" });
  });
  for (const name of ["execution_success", "execution_error", "execution_interrupted"]) {
    api.addEventListener(name, () => {
      dispatch({ type: "run/finished" });
      if (views.size) loadSessions(true);
    });
  }
}

// --------------------------------------------------------------------------- actions

async function confirmDialog(title, message) {
  const dialog = app.extensionManager?.dialog;
  if (typeof dialog?.confirm === "function") {
    return (await dialog.confirm({ title, message, type: "default" })) === true;
  }
  return window.confirm(message);
}

function toast(severity, summary, detail) {
  const t = app.extensionManager?.toast;
  if (typeof t?.add === "function") t.add({ severity, summary, detail, life: 4000 });
}

async function rewind(sid, k) {
  const path = V.rewindPath(sid, state.stores[sid]);
  const count = state.session?.turns.length ?? 0;
  if (!path || !(await confirmDialog("Undo turns", V.rewindQuestion(sid, k, count)))) return;
  try {
    const res = await api.fetchApi(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ turn: k }),
    });
    const body = await res.json().catch(() => null);
    if (!res.ok) throw new Error(body?.error ?? `HTTP ${res.status}`);
    dispatch({ type: "session/loaded", data: body });
    loadSessions(true);
    toast("success", "ReSpec", `Session "${sid}" rewound to turn ${k}.`);
  } catch (e) {
    dispatch({ type: "error", message: `Rewind failed: ${e.message}` });
    toast("error", "ReSpec", `Rewind failed: ${e.message}`);
  }
}

function graphNow() {
  const graph = app.rootGraph ?? app.graph;
  return { graph, nodes: graph?._nodes ?? graph?.nodes ?? [], links: graph?.links ?? graph?._links ?? {} };
}

function setWidget(graph, nodeId, name, value) {
  const node = graph?.getNodeById?.(nodeId) ?? (graph?._nodes ?? []).find((n) => n.id === nodeId);
  const w = node?.widgets?.find((x) => x.name === name);
  if (!w) return false;
  w.value = value;
  try {
    w.callback?.(value, app.canvas, node);
  } catch (e) {
    console.warn("ReSpec: a widget callback failed", e);
  }
  return true;
}

/** An event's data with the title its node has in the graph (`node_title`), so that a failed turn's
 * card names the node as the user sees it, not its class. */
function withNodeTitle(data) {
  if (data.node_id === undefined || data.node_id === null) return data;
  const { graph } = graphNow();
  const node = graph?.getNodeById?.(Number(data.node_id)) ?? graph?.getNodeById?.(data.node_id);
  return node?.title ? { ...data, node_title: node.title } : data;
}

async function findPromptId(target, request) {
  // app.queuePrompt does not return the prompt's id: find the prompt that carries this request.
  const q = await getJson("/queue");
  let id = C.findQueuedPrompt([...(q?.queue_running ?? []), ...(q?.queue_pending ?? [])], target.nodeId, target.widget, request);
  if (id) return { id, done: null };
  const h = await getJson("/history?max_items=8");
  const entries = Object.values(h ?? {});
  id = C.findQueuedPrompt(entries, target.nodeId, target.widget, request);
  const entry = entries.find((e) => Array.isArray(e?.prompt) && e.prompt[1] === id);
  return { id, done: entry?.status ?? null };
}

function widgetValue(graph, nodeId, name) {
  const node = graph?.getNodeById?.(nodeId) ?? (graph?._nodes ?? []).find((n) => n.id === nodeId);
  return node?.widgets?.find((x) => x.name === name)?.value;
}

/** Set the composer's widget edits and wait until the graph holds them (three tries): Nodes 2.0 keeps
 * widget values in its own store and once wrote the old seed back after it was set, so a Regenerate
 * went out unchanged. Returns the edits the graph still does not hold. */
async function applyEdits(graph, edits) {
  let left = edits;
  for (let i = 0; i < 3 && left.length; i++) {
    for (const e of left) setWidget(graph, e.nodeId, e.widget, e.value);
    graph?.setDirtyCanvas?.(true, true);
    await new Promise((r) => setTimeout(r, 60));   // a frame for the renderer to write back, if it does
    left = C.editsNotHeld(left, (e) => widgetValue(graph, e.nodeId, e.widget));
  }
  return left;
}

/** Send one turn: fill the request node found by type, point the History Store at the shown session,
 * queue through the frontend's own queue call (other extensions and the queue panel see a normal
 * prompt), and follow it on a pending card. */
async function sendTurn(request, { newSeed = false } = {}) {
  const problem = C.requestProblem(request);
  const { graph, nodes, links } = graphNow();
  const target = C.findRequestTarget(nodes, links);
  composerNote = problem || (target.ok ? "" : target.message);
  if (composerNote || C.isBusy(composer)) {
    schedule();
    return false;
  }
  const sid = V.activeSessionId(state) ?? V.sessionIdsFromNodes(nodes)[0] ?? null;
  const session = state.session && state.session.session_id === sid ? state.session : null;
  dispatchComposer({ type: "send", request, sessionId: sid, turn: session ? session.turns.length : 1,
    unavailable: C.unavailableChoices(nodes) });
  const seedNow = nodes.flatMap((n) => n.widgets ?? []).find((w) => w.name === "seed" || w.name === "noise_seed")?.value;
  try {
    const lost = await applyEdits(graph, C.graphEdits(nodes, target, request, sid, newSeed ? C.nextSeed(seedNow) : null));
    if (lost.length) throw new Error(C.editsLostMessage(lost));
    await app.queuePrompt(0, 1);
    const { id, done } = await findPromptId(target, request);
    if (!id) throw new Error(C.refusalMessage(graphNow().nodes, app.lastNodeErrors));
    // Queued with some outputs refused (ComfyUI runs the rest): why, should no turn come of it.
    dispatchComposer({ type: "queued", promptId: id, refused: C.nodeErrorText(graphNow().nodes, app.lastNodeErrors) });
    if (done) {
      // It had finished already: its events were replayed on "queued". Should the socket have lost
      // them, /history keeps the prompt's own messages, its execution_error among them.
      for (const [type, data] of C.historyEvents(done, id)) dispatchComposer({ type, data: withNodeTitle(data) });
    }
    return true;
  } catch (e) {
    dispatchComposer({ type: "refused", message: e.message ?? String(e) });
    return false;
  }
}

async function cancelTurn() {
  const id = composer.promptId;
  if (!id) return;
  try {
    if (composer.phase === "queued") {
      await api.deleteItem?.("queue", id);
      dispatchComposer({ type: "execution_interrupted", data: { prompt_id: id } });
    }
    await api.interrupt?.(id); // the composer's prompt only (newer frontends pass the id on)
  } catch (e) {
    toast("error", "ReSpec", `Cancel failed: ${e.message}`);
  }
}

async function postJson(path, body) {
  const res = await api.fetchApi(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const out = await res.json().catch(() => null);
  if (!res.ok) throw new Error(out?.error ?? `HTTP ${res.status}`);
  return out;
}

/** A card's Branch from here / Regenerate (Undo to here is rewind()). */
async function cardAction(kind, sid, card) {
  const store = state.stores[sid];
  // The card's own session decides (the panel may hold another one for a moment, e.g. just after a
  // branch, while it loads the session it follows).
  const shown = state.session?.session_id === sid ? state.session
    : await getJson(V.sessionPath(sid, store)).catch(() => null);
  const count = Array.isArray(shown?.turns) ? shown.turns.length : 0;
  const act = C.cardAction(kind, { sessionId: sid, count, k: card.index, instruction: card.instruction,
    paths: { rewind: V.rewindPath(sid, store), branch: C.branchPath(sid, store) } });
  if (!act || (act.queue && C.isBusy(composer))) {
    const why = C.cardActionRefusal(kind, { count, k: card.index, busy: !!act && C.isBusy(composer) });
    console.warn(`ReSpec: ${why}`);   // the checker reads the console: why a click did nothing, on record
    toast("warn", "ReSpec", why);
    return;
  }
  try {
    const body = await postJson(act.route, act.body);
    dispatch({ type: "session/loaded", data: body });
    if (act.follow) {
      // Follow the new session: the panel shows it and the next turn goes to it.
      const { graph, nodes, links } = graphNow();
      const target = C.findRequestTarget(nodes, links);
      if (target.ok && target.storeId !== null) setWidget(graph, target.storeId, "session_id", body.session_id);
      dispatch({ type: "session/pinned", sessionId: body.session_id });
      toast("success", "ReSpec", `Branched "${sid}" at turn ${card.index} into "${body.session_id}".`);
    }
    loadSessions(true);
    if (act.queue) await sendTurn(act.request, { newSeed: act.newSeed });
  } catch (e) {
    console.warn(`ReSpec: ${kind} failed: ${e.message}`);   // on record, as the toast says it
    dispatch({ type: "error", message: `${kind} failed: ${e.message}` });
    toast("error", "ReSpec", `${kind} failed: ${e.message}`);
  }
}

/** Sessions list's "Clean up": a dry run says what would go, the user confirms, then the clean-up
 * (of the store of the session shown; the default store when none). */
async function cleanUp() {
  const path = V.gcPath(state.stores[V.activeSessionId(state)] ?? null);
  try {
    const preview = await postJson(path, { dry_run: true });
    const question = V.gcQuestion(preview);
    if (question && !(await confirmDialog("Clean up the session store", question))) return;
    toast("success", "ReSpec", V.gcMessage(question ? await postJson(path, {}) : preview));
  } catch (e) {
    dispatch({ type: "error", message: `Clean-up failed: ${e.message}` });
    toast("error", "ReSpec", `Clean-up failed: ${e.message}`);
  }
}

async function unloadModels() {
  try {
    const res = await api.fetchApi("/respec/models/unload", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
    const body = await res.json().catch(() => null);
    if (!res.ok) throw new Error(body?.error ?? `HTTP ${res.status}`);
    toast("success", "ReSpec", V.unloadMessage(body));
  } catch (e) {
    dispatch({ type: "error", message: `Unload failed: ${e.message}` });
    toast("error", "ReSpec", `Unload failed: ${e.message}`);
  }
}

// --------------------------------------------------------------------------- drawing

const STYLE = `
.respec-panel{display:flex;flex-direction:column;gap:10px;padding:10px;height:100%;overflow:auto;box-sizing:border-box;font-size:13px;color:var(--fg-color,#ddd)}
.respec-panel h3{margin:0;font-size:12px;text-transform:uppercase;letter-spacing:.05em;opacity:.7}
.respec-row{display:flex;align-items:center;gap:6px;flex-wrap:wrap}
.respec-panel select,.respec-panel button{background:var(--comfy-input-bg,#222);color:inherit;border:1px solid var(--border-color,#444);border-radius:4px;padding:3px 6px;font-size:12px}
.respec-panel button{cursor:pointer}
.respec-panel select{flex:1;min-width:0}
.respec-status{font-size:11px;opacity:.8}
.respec-status.running::before{content:"";display:inline-block;width:8px;height:8px;border-radius:50%;background:#f1c40f;margin-right:5px}
.respec-msg{padding:8px;border:1px dashed var(--border-color,#555);border-radius:4px;opacity:.85}
.respec-msg.error{border-color:#c0392b;color:#e74c3c}
.respec-latest canvas{display:block;width:100%;border-radius:4px;background:rgba(0,0,0,.25)}
.respec-plan{font-size:12px;line-height:1.4;overflow-wrap:anywhere}
.respec-showing{font-size:11px;opacity:.8;overflow-wrap:anywhere}
.respec-changes{font-size:12px;padding:4px 6px;border-left:3px solid #f1c40f;background:rgba(241,196,15,.08)}
.respec-legend label{display:inline-flex;align-items:center;gap:4px;font-size:12px;margin-right:10px}
.respec-swatch{display:inline-block;width:10px;height:10px;border-radius:2px}
.respec-scores table{border-collapse:collapse;width:100%;font-size:12px}
.respec-scores td{padding:2px 4px;border-bottom:1px solid var(--border-color,#333)}
.respec-scores td.v{text-align:right;font-variant-numeric:tabular-nums}
.respec-scores td.missing{opacity:.6}
.respec-grid{display:grid;gap:6px}
.respec-card{position:relative;border:2px solid transparent;border-radius:6px;padding:3px;background:rgba(127,127,127,.08);display:flex;flex-direction:column;gap:2px;min-width:0}
.respec-card.restoration-source{border-color:#2ecc71}
.respec-card.identity-anchor{border-color:#e67e22}
.respec-card.restoration-source.identity-anchor{border-image:linear-gradient(90deg,#2ecc71,#e67e22) 1}
.respec-card img{width:100%;object-fit:contain;background:rgba(0,0,0,.25);border-radius:3px}
.respec-card .t{font-weight:600;font-size:11px}
.respec-card .u,.respec-card .s{font-size:11px;line-height:1.25;overflow-wrap:anywhere}
.respec-card .s{opacity:.75;font-style:italic}
.respec-card .hist{font-size:11px;line-height:1.25;overflow-wrap:anywhere;opacity:.85}
.respec-card .hist.applied{color:#1abc9c;opacity:1}
.respec-badges{display:flex;gap:3px;flex-wrap:wrap}
.respec-badge{font-size:10px;padding:0 4px;border-radius:3px;color:#111}
.respec-badge.restoration-source{background:#2ecc71}
.respec-badge.identity-anchor{background:#e67e22}
.respec-card button{font-size:11px;padding:1px 4px;margin-top:2px}
.respec-card.pending{border:2px dashed #f1c40f}
.respec-card.pending.failed{border-color:#c0392b}
.respec-card .err{font-size:12px;font-weight:600;color:#e74c3c;overflow-wrap:anywhere}
.respec-card .err.more{font-weight:400;opacity:.9}
.respec-slot{display:flex;align-items:center;justify-content:center;opacity:.6;background:rgba(0,0,0,.15);border-radius:3px}
.respec-card .st{font-size:11px;opacity:.85}
.respec-bar{height:4px;border-radius:2px;background:rgba(127,127,127,.3);overflow:hidden}
.respec-bar>div{height:100%;background:#f1c40f;transition:width .2s}
.respec-actions{display:flex;flex-wrap:wrap;gap:2px}
.respec-composer{display:flex;flex-direction:column;gap:4px;position:sticky;bottom:0;padding-top:4px;background:var(--comfy-menu-bg,#353535)}
.respec-composer textarea{width:100%;box-sizing:border-box;min-height:52px;resize:vertical;background:var(--comfy-input-bg,#222);color:inherit;border:1px solid var(--border-color,#444);border-radius:6px;padding:6px;font:inherit}
.respec-composer .note{font-size:11px;color:#e67e22}
.respec-composer .hint{font-size:10px;opacity:.6}
.respec-picker{display:flex;flex-direction:column;gap:2px;max-height:160px;overflow:auto}
.respec-picker button{display:flex;align-items:center;gap:6px;text-align:left;width:100%}
.respec-picker button.on{border-color:#f1c40f}
.respec-picker img{width:32px;height:32px;object-fit:cover;border-radius:3px;background:rgba(0,0,0,.25)}
:host{display:block;height:100%}
`;

/** The panel's own DOM: a shadow root on the sidebar's element, holding the stylesheet, so the
 * panel's rules style nothing else on the page (and no other stylesheet reaches in). */
function panelRoot(el) {
  const root = el.shadowRoot ?? el.attachShadow({ mode: "open" });
  root.replaceChildren(h("style", {}, STYLE));
  return root;
}

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) el.append(c);
  return el;
}

function mount(el) {
  if ([...views].some((v) => v.el === el)) return; // the frontend may call render() again
  el.setAttribute("data-respec-panel", "");
  const shadow = panelRoot(el);
  const parts = {
    status: h("span", { class: "respec-status" }),
    select: h("select", { "aria-label": "Session" }),
    msg: h("div", { class: "respec-msg" }),
    latest: h("div", { class: "respec-latest" }),
    canvas: h("canvas", { width: "300", height: "200" }),
    plan: h("div", { class: "respec-plan" }),
    legend: h("div", { class: "respec-legend" }),
    changes: h("div", { class: "respec-changes", hidden: "" }),
    showing: h("div", { class: "respec-showing" }),
    scores: h("div", { class: "respec-scores" }),
    grid: h("div", { class: "respec-grid" }),
    turnsTitle: h("h3", {}, "Turns"),
    latestTitle: h("h3", {}, "Latest image"),
    picker: h("div", { class: "respec-picker", role: "listbox", "aria-label": "Sessions" }),
    input: h("textarea", { "aria-label": "Your request", placeholder: "Describe the next edit… (Enter sends, Shift+Enter: new line)" }),
    send: h("button", { class: "respec-send", title: "Queue this request as the next turn (Enter)" }, "Send"),
    cancel: h("button", { class: "respec-cancel", title: "Interrupt the turn being made" }, "Cancel"),
    note: h("div", { class: "note" }),
  };
  parts.input.addEventListener("keydown", (e) => {
    if (C.keyAction(e) !== "send") return;
    e.preventDefault();
    e.stopPropagation(); // the canvas's own shortcuts must not see it
    submit(parts);
  });
  parts.send.addEventListener("click", () => submit(parts));
  parts.cancel.addEventListener("click", cancelTurn);
  parts.select.addEventListener("change", () => dispatch({ type: "session/pinned", sessionId: parts.select.value || null }));
  parts.latest.append(parts.latestTitle, parts.canvas, parts.legend, parts.changes, parts.plan);
  const root = h(
    "div",
    { class: "respec-panel" },
    h("div", { class: "respec-row" }, h("strong", {}, "ReSpec"), parts.status),
    h("div", { class: "respec-row" }, parts.select, h("button", { title: "Reload sessions", onclick: () => loadSessions(true) }, "↻"),
      h("button", { title: "Unload every ReSpec model (VLM, editors, masks, metrics) and free its memory", onclick: unloadModels }, "Unload models")),
    parts.showing,
    parts.msg,
    parts.latest,
    h("div", {}, h("h3", {}, "OCCUR scores"), parts.scores),
    h("details", {}, h("summary", {}, "Sessions"), parts.picker,
      h("button", { title: "Delete the image files no turn uses any more (undone turns, deleted sessions); asks first", onclick: cleanUp }, "Clean up unused images")),
    parts.turnsTitle,
    parts.grid,
    h("div", { class: "respec-composer" }, parts.note, parts.input,
      h("div", { class: "respec-row" }, parts.send, parts.cancel,
        h("span", { class: "hint" }, "Enter sends · Shift+Enter new line"))),
  );
  shadow.append(root);
  const view = { el, parts, cards: new Map(), drawn: "", focus: null,
    overlaysOn: { R_restore: true, R_preserve: true, change: true, reveal_source: true, undo_source: true } };
  views.add(view);
  scanGraph();
  loadSessions(true);
  loadLatestScores();
  if (!pollTimer) pollTimer = setInterval(() => (views.size ? scanGraph() : stopPolling()), GRAPH_POLL_MS);
  render(view);
}

async function submit(parts) {
  const text = parts.input.value;
  if (await sendTurn(text)) parts.input.value = "";
}

function stopPolling() {
  clearInterval(pollTimer);
  pollTimer = null;
}

function unmount() {
  // destroy() gets no element: drop every panel that is no longer in the page.
  setTimeout(() => {
    for (const view of [...views]) if (!view.el.isConnected) views.delete(view);
    if (!views.size) stopPolling();
  }, 0);
}

function renderSelect(view, active) {
  // The drop-down's text is short (it may still be cut in a narrow sidebar): the line under it says
  // in full which session is shown, and the drop-down's tooltip names the chosen entry.
  const sel = view.parts.select;
  const opts = [["", "Follow the graph"]];
  for (const s of state.sessions) opts.push([s.session_id, `${s.session_id} · ${Math.max(0, (s.turns ?? 1) - 1)} edits`]);
  if (state.pinned && !state.sessions.some((s) => s.session_id === state.pinned)) opts.push([state.pinned, state.pinned]);
  const key = JSON.stringify(opts);
  if (sel.dataset.key !== key) {
    sel.replaceChildren(...opts.map(([v, label]) => h("option", { value: v, title: label }, label)));
    sel.dataset.key = key;
  }
  sel.value = state.pinned ?? "";
  const chosen = opts.find(([v]) => v === sel.value)?.[1] ?? "";
  sel.title = sel.value ? chosen : `${chosen}${active ? `: showing ${active}` : ""}`;
  view.parts.showing.textContent = V.showingLine(state, active);
  view.parts.showing.hidden = !active;
}

function render(view) {
  const { parts } = view;
  const active = V.activeSessionId(state);
  const session = state.session && state.session.session_id === active ? state.session : null;
  parts.status.textContent = state.running ? (state.activity ? `running · ${state.activity}` : "running") : "";
  parts.status.className = `respec-status${state.running ? " running" : ""}`;
  renderSelect(view, active);
  const msg = V.panelMessage(state, active, session, C.isBusy(composer) && composer.sessionId === active);
  parts.msg.hidden = !msg;
  if (msg) {
    parts.msg.className = `respec-msg${msg[0] ? ` ${msg[0]}` : ""}`;
    parts.msg.textContent = msg[1];
  }
  const cards = V.turnCards(state);
  parts.latest.hidden = !session || !cards.length;
  parts.turnsTitle.hidden = !cards.length;
  renderScores(view);
  if (session && cards.length) {
    renderPlan(view, session);
    // A card's "changes" button shows that turn (with its masks) in place of the latest image.
    const focused = cards.find((c) => c.index === view.focus) ?? cards[cards.length - 1];
    renderLatest(view, session, focused);
  }
  renderGrid(view, active, cards);
  renderComposer(view);
  renderPicker(view, active);
}

function renderComposer(view) {
  const { parts } = view;
  const busy = C.isBusy(composer);
  parts.send.disabled = busy;
  parts.cancel.hidden = !busy;
  parts.note.textContent = composerNote;
  parts.note.hidden = !composerNote;
}

function renderPicker(view, active) {
  const rows = C.pickerRows(state.sessions, 32);
  const key = JSON.stringify([rows, active]);
  if (view.parts.picker.dataset.key === key) return;
  view.parts.picker.dataset.key = key;
  view.parts.picker.replaceChildren(...rows.map((r) => h("button", {
    class: r.sessionId === active ? "on" : "", role: "option", title: `Show session ${r.sessionId}; the next turn goes to it`,
    onclick: () => dispatch({ type: "session/pinned", sessionId: r.sessionId }),
  }, h("img", { src: api.apiURL(r.thumb), alt: "", loading: "lazy" }), h("span", {}, r.label))));
}

function renderScores(view) {
  const rows = V.scoreRows(state.scores);
  const el = view.parts.scores;
  if (!rows.length) {
    el.textContent = "No scores yet (run the OCCUR Score node).";
    return;
  }
  const sid = state.scores?.session_id;
  const table = h("table", {}, ...rows.map((r) =>
    h("tr", {}, h("td", {}, r.label), h("td", { class: `v${r.missing ? " missing" : ""}` }, r.value))));
  el.replaceChildren(table, sid ? h("div", { class: "respec-status" }, `for session ${sid}`) : null);
}

function renderPlan(view, session) {
  const plan = V.currentPlan(state);
  const el = view.parts.plan;
  const lines = V.planLines(plan, V.editorReferences(state));
  if (!lines.length) {
    el.textContent = plan ? "No plan to show: the latest turn made no controller call (turn 1 has no history to read)."
      : "No controller plan in this session yet.";
    return;
  }
  el.replaceChildren(...lines.map((l) => h("div", l.title ? { title: l.title } : {}, l.text)));
}

function renderLegend(view, overlays, fractions = {}) {
  const names = { R_restore: "R_restore (to restore)", R_preserve: "R_preserve (to keep)" };
  for (const o of overlays) if (o.label) names[o.name] = V.maskLegend(o.name, fractions[o.name]);
  const key = overlays.map((o) => `${o.name}:${names[o.name]}`).join(",");
  if (view.parts.legend.dataset.key === key) return;
  view.parts.legend.dataset.key = key;
  view.parts.legend.replaceChildren(...overlays.map((o) => {
    const box = h("input", { type: "checkbox" });
    box.checked = view.overlaysOn[o.name] !== false;
    box.addEventListener("change", () => {
      view.overlaysOn[o.name] = box.checked;
      view.drawn = "";
      render(view);
    });
    return h("label", {}, box, h("span", { class: "respec-swatch", style: `background:rgb(${o.color.join(",")})` }), names[o.name]);
  }));
}

function loadImage(path) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error(`could not load ${path}`));
    img.src = api.apiURL(path);
  });
}

async function renderLatest(view, session, card) {
  // The scores' regions belong to the latest image; a turn's own masks to that turn.
  const overlays = [...(card.latest ? V.overlayList(state.scores) : []),
    ...V.turnOverlays(session.session_id, card, state.stores[session.session_id])];
  view.parts.latestTitle.textContent = card.latest ? "Latest image" : `Turn ${card.index} (${card.label})`;
  renderLegend(view, overlays, card.maskFractions);
  const canvas = view.parts.canvas;
  const boxW = Math.max(120, view.parts.latest.clientWidth || 280);
  const boxH = Math.round(boxW * 0.75);
  const shown = overlays.filter((o) => view.overlaysOn[o.name] !== false);
  const key = [session.session_id, card.image, boxW, ...shown.map((o) => o.url)].join("|");
  if (view.drawn === key) return;
  view.drawn = key;
  view.parts.changes.hidden = true;
  const dpr = window.devicePixelRatio || 1;
  const path = V.imagePath(session.session_id, card.image, V.requestSide(boxW, dpr), V.requestSide(boxH, dpr),
    state.stores[session.session_id]);
  if (!path) return;
  try {
    const img = await loadImage(path);
    const masks = await Promise.all(shown.map((o) => loadImage(o.url).then((m) => ({ o, m })).catch(() => null)));
    if (view.drawn !== key) return; // a newer draw started meanwhile
    const rect = V.fitContain(img.naturalWidth, img.naturalHeight, boxW, boxH);
    canvas.width = Math.round(rect.width * dpr);
    canvas.height = Math.round(rect.height * dpr);
    canvas.style.aspectRatio = `${rect.width} / ${rect.height}`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.drawImage(img, 0, 0, rect.width, rect.height);
    const target = { x: 0, y: 0, width: rect.width, height: rect.height };
    const found = {}; // a turn mask: true = pixels set, false = empty, null = not loaded
    for (const o of shown) if (o.name in V.TURN_OVERLAYS) found[o.name] = null;
    for (const entry of masks) {
      if (!entry) continue;
      const { o, m } = entry;
      const t = V.maskTransform(m.naturalWidth, m.naturalHeight, target);
      if (!t) continue;
      const off = document.createElement("canvas");
      off.width = m.naturalWidth;
      off.height = m.naturalHeight;
      const octx = off.getContext("2d", { willReadFrequently: true });
      octx.drawImage(m, 0, 0);
      const data = octx.getImageData(0, 0, off.width, off.height);
      const bounds = V.maskBounds(data.data, off.width, off.height);
      if (o.name in V.TURN_OVERLAYS) found[o.name] = bounds !== null;
      data.data.set(V.tintMask(data.data, o.color, 0.45));
      octx.putImageData(data, 0, 0);
      ctx.drawImage(off, t.x, t.y, t.width, t.height);
      // A box around a turn's changes, at least a few pixels a side: a change too small to see
      // tinted at this size is still found.
      const box = o.name in V.TURN_OVERLAYS ? V.outlineRect(bounds, off.width, off.height, t) : null;
      if (box) {
        ctx.strokeStyle = `rgb(${o.color.join(",")})`;
        ctx.lineWidth = 2;
        ctx.strokeRect(box.x + 1, box.y + 1, Math.max(1, box.width - 2), Math.max(1, box.height - 2));
      }
    }
    const note = Object.keys(found).length ? V.changesNote(found) : null;
    view.parts.changes.textContent = note ?? "";
    view.parts.changes.hidden = !note;
  } catch (e) {
    view.drawn = "";
    dispatch({ type: "error", message: e.message });
  }
}

function renderGrid(view, sid, cards) {
  const grid = view.parts.grid;
  const width = grid.clientWidth || view.el.clientWidth || 300;
  const layout = V.thumbnailLayout(cards.length, width, { minWidth: CARD_MIN_WIDTH, gap: 6, aspect: 4 / 3 });
  grid.style.gridTemplateColumns = `repeat(${layout.columns}, minmax(0, 1fr))`;
  const side = V.requestSide(layout.width, window.devicePixelRatio || 1);
  const wanted = [];
  for (const c of cards) {
    const busy = C.isBusy(composer);
    const key = `${sid}|${state.stores[sid] ?? ""}|${c.index}|${c.image}|${c.instruction}|${c.sentInstruction}|${c.roles.join()}|${c.canRewind}|${c.latest}|${busy}|${side}|${Object.values(c.masks).join()}|${c.history?.text ?? ""}|${view.focus === c.index}`;
    let el = view.cards.get(key);
    if (!el) {
      el = buildCard(view, sid, c, side, layout.height);
      view.cards.set(key, el);
    }
    wanted.push(el);
  }
  const keep = new Set(wanted);
  for (const [k, el] of view.cards) if (!keep.has(el)) view.cards.delete(k);
  const pending = C.pendingCard(composer);
  if (pending && (composer.sessionId === null || composer.sessionId === sid)) wanted.push(buildPending(pending, layout.height));
  if (wanted.length !== grid.children.length || wanted.some((el, i) => grid.children[i] !== el)) grid.replaceChildren(...wanted);
}

function buildCard(view, sid, c, side, height) {
  const badges = h("div", { class: "respec-badges" }, ...c.roles.map((r) =>
    h("span", { class: `respec-badge ${r}` }, r === "restoration-source" ? "restoration source" : "identity anchor")));
  const path = V.imagePath(sid, c.image, side, Math.round(side * 0.75), state.stores[sid]);
  const img = path ? h("img", { src: api.apiURL(path), alt: c.label, loading: "lazy", style: `height:${height}px` }) : null;
  const card = h(
    "div",
    { class: ["respec-card", ...c.roles].join(" "), title: c.label },
    img,
    h("div", { class: "t" }, c.label),
    badges,
    c.index > 0 ? h("div", { class: "u" }, `“${c.instruction}”`) : null,
    c.rewritten ? h("div", { class: "s", title: "instruction sent to the editor" }, `→ ${c.sentInstruction}`) : null,
    c.history ? h("div", { class: `hist${c.history.applied ? " applied" : ""}`, title: "history first" }, c.history.text) : null,
  );
  if (c.masks.change || c.masks.reveal_source || c.masks.undo_source) {
    const on = view.focus === c.index;
    card.append(h("button", {
      title: on ? "Show the latest image again" : `Show turn ${c.index} above with the pixels it changed`,
      onclick: () => {
        view.focus = on ? null : c.index;
        view.drawn = "";
        render(view);
      },
    }, on ? "◉ changes shown" : "◎ show changes"));
  }
  const count = state.session?.turns.length ?? 0;
  const actions = h("div", { class: "respec-actions" });
  for (const kind of C.cardActions(c.index, count)) {
    if (kind === "undo") {
      actions.append(h("button", { class: "respec-undo", title: `Undo the turns after ${c.index}`, onclick: () => rewind(sid, c.index) }, "↶ Undo to here"));
    } else if (kind === "branch") {
      actions.append(h("button", { class: "respec-branch", title: `A new session with turns 0..${c.index}; the panel follows it`,
        onclick: () => cardAction("branch", sid, c) }, "Branch from here"));
    } else if (kind === "regenerate") {
      const b = h("button", { class: "respec-regenerate", title: V.regenerateTitle(c.history),
        onclick: () => cardAction("regenerate", sid, c) }, "↻ Regenerate");
      b.disabled = C.isBusy(composer);
      actions.append(b);
    }
  }
  card.append(actions);
  return card;
}

function buildPending(p, height) {
  // A failed or cancelled turn was never made: no picture box, its error's first line at the top
  // (the whole error in the tooltip). A live turn keeps the place of its picture.
  const card = h("div", { class: `respec-card pending${p.error ? " failed" : ""}`, "data-pending": "" });
  if (p.error) {
    card.append(
      h("div", { class: "t" }, `✕ ${p.title} not made`),
      ...(p.errorLines.length ? p.errorLines : [p.error]).map((line, i) =>
        h("div", { class: i ? "err more" : "err", title: p.errorDetail ?? p.error }, line)),
      h("div", { class: "st" }, p.status),
      h("div", { class: "u" }, `“${p.request}”`),
      h("button", { onclick: () => dispatchComposer({ type: "dismiss" }) }, "Dismiss"));
    return card;
  }
  card.append(
    h("div", { class: "respec-slot", style: `height:${Math.round(height / 2)}px` }, "…"),
    h("div", { class: "t" }, `${p.title} (being made)`),
    h("div", { class: "u" }, `“${p.request}”`),
    h("div", { class: "st" }, p.status),
    h("div", { class: "respec-bar" }, h("div", { style: `width:${p.percent ?? 0}%` })),
    ...p.plan.map((l) => h("div", l.title ? { class: "s", title: l.title } : { class: "s" }, l.text)),
    h("button", { class: "respec-cancel", onclick: cancelTurn }, "Cancel"));
  return card;
}

// --------------------------------------------------------------------------- registration

app.registerExtension({
  name: "respechistorygroundedconversationalediting.panel", // inside the pack's namespace (its DisplayName)
  nodeCreated(node) {
    // The pack's loaders: each entry of the model drop-down says whether it is installed (the label
    // only: the value, which saved graphs hold, stays the id).
    const labels = C.installedLabellers(node?.constructor?.nodeData);
    for (const w of node?.widgets ?? []) {
      if (labels[w.name] && w.options) w.options.getOptionLabel = labels[w.name];
    }
  },
  setup() {
    listen();
    const manager = app.extensionManager;
    if (typeof manager?.registerSidebarTab !== "function") return; // frontends before 1.3 have no sidebar API
    manager.registerSidebarTab({
      id: TAB_ID,
      icon: "pi pi-history",
      title: "ReSpec",
      tooltip: "ReSpec: editing turns, chosen references, regions and OCCUR scores",
      type: "custom",
      render: mount,
      destroy: unmount,
    });
  },
});
