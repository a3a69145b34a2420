// Pure logic of the panel's composer (the chat-style request box) and of the per-turn actions:
// which node carries the request P_t, how the graph is prepared for a turn, the pending turn's
// states (queued -> running with progress and plan -> done | error | cancelled), and what each
// card action does (route, body, whether a prompt is queued). No DOM, no ComfyUI imports, so
// Node's test runner covers it (js/tests/respec_composer.test.mjs).

import { fallbackWords, planDecided } from "./respec_view.js";

const SESSION_ID = /^[A-Za-z0-9_-]{1,64}$/;
const APPEND = "ReSpecHistoryAppend";
const STORE = "ReSpecHistoryStore";
const TEXT_WIDGETS = ["value", "text", "string", "prompt"];
const SEED_WIDGETS = ["seed", "noise_seed"];
export const MAX_REQUEST_BYTES = 16 * 1024; // the server refuses longer requests (respec/controller/request.py)

function nodeType(node) {
  return node?.comfyClass ?? node?.type;
}

function active(node) {
  return node && node.mode !== 2 && node.mode !== 4; // 2 = muted ("never"), 4 = bypassed
}

function widget(node, name) {
  return (Array.isArray(node?.widgets) ? node.widgets : []).find((w) => w?.name === name) ?? null;
}

/** The link feeding input `name` of `node` as {originId, originSlot}, or null. `links` maps a link
 * id to a link ({origin_id, origin_slot}, LiteGraph's LLink) or to an array [id, origin, slot, ...]. */
export function inputSource(node, name, links) {
  const slot = (Array.isArray(node?.inputs) ? node.inputs : []).find((i) => i?.name === name);
  if (!slot || slot.link === null || slot.link === undefined) return null;
  const get = typeof links?.get === "function" ? (id) => links.get(id) : (id) => links?.[id];
  const link = get(slot.link);
  if (!link) return null;
  if (Array.isArray(link)) return { originId: link[1], originSlot: link[2] };
  return { originId: link.origin_id, originSlot: link.origin_slot };
}

/**
 * The node and widget that carry the user's request P_t in a conversational graph, found by type:
 * the (only active) History Append's `instruction`, followed back through its link to the text
 * node feeding it ("Your request", a PrimitiveStringMultiline), or the Append's own widget when
 * nothing is linked. Returns {ok: true, nodeId, widget, appendId, storeId} or {ok: false, message}.
 */
export function findRequestTarget(nodes, links) {
  const list = (Array.isArray(nodes) ? nodes : []).filter(active);
  const appends = list.filter((n) => nodeType(n) === APPEND);
  if (!appends.length) {
    return { ok: false, message: "This graph has no History Append (ReSpec) node, so there is no conversation to " +
      "send a request to. Open a conversational workflow (a \"ReSpec chat\" one from the template " +
      "browser) and type here again." };
  }
  if (appends.length > 1) {
    return { ok: false, message: `This graph has ${appends.length} History Append (ReSpec) nodes (a benchmark ` +
      "graph?); the composer sends one request per turn to a conversational graph with exactly one." };
  }
  const append = appends[0];
  const stores = list.filter((n) => nodeType(n) === STORE);
  const storeId = stores.length === 1 ? stores[0].id : null;
  const src = inputSource(append, "instruction", links);
  if (!src) {
    if (!widget(append, "instruction")) {
      return { ok: false, message: "History Append's instruction input is not connected: connect your request to it." };
    }
    return { ok: true, nodeId: append.id, widget: "instruction", appendId: append.id, storeId };
  }
  const origin = (Array.isArray(nodes) ? nodes : []).find((n) => n?.id === src.originId);
  const name = TEXT_WIDGETS.find((w) => widget(origin, w) && typeof widget(origin, w).value === "string");
  if (!origin || !name) {
    return { ok: false, message: `History Append's instruction comes from node ${src.originId} ` +
      `(${nodeType(origin) ?? "missing"}), which has no text box the composer can fill. Feed it from a text ` +
      "node such as String (Multiline)." };
  }
  return { ok: true, nodeId: origin.id, widget: name, appendId: append.id, storeId };
}

/** UTF-8 byte length of a string (what the server's 16 KiB limit counts). */
export function utf8Length(text) {
  let n = 0;
  for (const ch of String(text)) {
    const c = ch.codePointAt(0);
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  return n;
}

/**
 * Why a request cannot be sent ("" when it can): empty, not text UTF-8 can carry (a lone surrogate,
 * a NUL: the server's text rule, respec/text.py), or over the server's limit.
 */
export function requestProblem(text) {
  if (typeof text !== "string" || !text.trim()) return "Type a request first.";
  let i = 0;
  for (const ch of text) {
    const c = ch.codePointAt(0);
    if (c >= 0xd800 && c <= 0xdfff) {
      return `The request holds a lone surrogate (U+${c.toString(16).toUpperCase()}) at character ${i}; remove that character.`;
    }
    if (c === 0) return `The request holds a NUL character at character ${i}; remove it.`;
    i += 1;   // code points, as the server counts them
  }
  const n = utf8Length(text);
  return n > MAX_REQUEST_BYTES ? `The request is ${n} bytes long; at most ${MAX_REQUEST_BYTES} (16 KiB) are accepted.` : "";
}

/** What the keyboard does in the composer: Enter sends, Shift+Enter (or an IME composition) types. */
export function keyAction(event) {
  if (event?.key !== "Enter" || event.isComposing) return "type";
  return event.shiftKey ? "newline" : "send";
}

/**
 * The widget changes that make the open graph run one turn of `sessionId` with `request`:
 * [{nodeId, widget, value}]. The History Store is pointed at the session and, when it was left in
 * rewind / branch / in-graph mode, set to `new` (a rewind there would stop the graph).
 * `newSeed` (a number) also sets every active seed widget (Regenerate).
 */
export function graphEdits(nodes, target, request, sessionId, newSeed = null) {
  const edits = [{ nodeId: target.nodeId, widget: target.widget, value: request }];
  const list = (Array.isArray(nodes) ? nodes : []).filter(active);
  const store = list.find((n) => n.id === target.storeId);
  if (store) {
    if (SESSION_ID.test(sessionId ?? "") && widget(store, "session_id") && widget(store, "session_id").value !== sessionId) {
      edits.push({ nodeId: store.id, widget: "session_id", value: sessionId });
    }
    const mode = widget(store, "mode")?.value;
    if (mode && mode !== "new" && mode !== "load") edits.push({ nodeId: store.id, widget: "mode", value: "new" });
  }
  if (Number.isInteger(newSeed)) {
    for (const n of list) {
      for (const name of SEED_WIDGETS) {
        if (widget(n, name) && typeof widget(n, name).value === "number") edits.push({ nodeId: n.id, widget: name, value: newSeed });
      }
    }
  }
  return edits;
}

/** The edits ({nodeId, widget, value}) whose widget does not hold their value (`read(edit)` gives it now). */
export function editsNotHeld(edits, read) {
  return (Array.isArray(edits) ? edits : []).filter((e) => read(e) !== e.value);
}

/** Why a turn was not sent: widgets that would not keep the composer's values. */
export function editsLostMessage(lost) {
  const names = lost.map((e) => `node ${e.nodeId}'s ${e.widget}`).join(", ");
  return `The graph did not keep the values the composer set (${names}): nothing was queued. Send it again; ` +
    "if it happens again, set them on the node and press Run.";
}

/**
 * Why ComfyUI would refuse the open graph, as far as the frontend can tell: the active nodes' list
 * widgets (a loader's model file, Load Image's picture) whose value is not one of the choices the
 * server sent, e.g. a model file that is not installed. [{nodeId, title, widget, value}]
 */
export function unavailableChoices(nodes) {
  const out = [];
  for (const n of (Array.isArray(nodes) ? nodes : []).filter(active)) {
    for (const w of Array.isArray(n.widgets) ? n.widgets : []) {
      const values = w?.options?.values;
      if (w?.type !== "combo" || !Array.isArray(values) || typeof w.value !== "string" || values.includes(w.value)) continue;
      out.push({ nodeId: n.id, title: n.title ?? nodeType(n), widget: w.name, value: w.value });
    }
  }
  return out;
}

/** The key of a loader's drop-down options that lists the values installed on the server
 * (respec/models.py INSTALLED_OPTION). */
export const INSTALLED_OPTION = "respec_installed";

/** For a node definition (the frontend's nodeData: V1 `input.required/optional` specs, or V2
 * `inputs`), the drop-downs that say which of their values are installed: {input name: label}, where
 * label(value) is what the drop-down shows for it, "(installed) <value>" or "(not installed)
 * <value>"; the value itself, which saved graphs hold, does not change. */
export function installedLabellers(nodeData) {
  const v1 = { ...(nodeData?.input?.required ?? {}), ...(nodeData?.input?.optional ?? {}) };
  const specs = Object.keys(v1).length
    ? Object.fromEntries(Object.entries(v1).map(([name, spec]) => [name, Array.isArray(spec) ? spec[1] : null]))
    : (nodeData?.inputs ?? {});
  const out = {};
  for (const [name, options] of Object.entries(specs)) {
    const installed = options?.[INSTALLED_OPTION];
    if (!Array.isArray(installed)) continue;
    const here = new Set(installed);
    // The mark comes first: a node's widget cuts a long value at its right end.
    out[name] = (value) => (typeof value === "string" && value
      ? `(${here.has(value) ? "installed" : "not installed"}) ${value}` : value);
  }
  return out;
}

/** ComfyUI's answer to /prompt about its nodes (the frontend keeps it as app.lastNodeErrors; ComfyUI
 * gives it when it refuses the prompt, and when it queues only the outputs whose inputs are valid):
 * the first refused node's title and its own words, or null. A loader that checks its model before
 * the prompt runs refuses with the run's words (Looked in, How to get it), which errorLines keeps. */
export function nodeErrorText(nodes, nodeErrors) {
  const refused = Object.entries(nodeErrors ?? {}).find(([, e]) => Array.isArray(e?.errors) && e.errors.length);
  if (!refused) return null;
  const [id, e] = refused;
  const node = (Array.isArray(nodes) ? nodes : []).find((n) => String(n.id) === String(id));
  // A custom validation's words follow its input's name: "model - Missing model weights: ...".
  const words = String(e.errors[0].details || e.errors[0].message || "").replace(/^\w+ - /, "");
  return `${node?.title || e.class_type || `node ${id}`}: ${words}`;
}

/** The error of a prompt ComfyUI refused to queue: ComfyUI's own words about the node (nodeErrorText),
 * else what the frontend can see is wrong (unavailableChoices), else where ComfyUI shows the reason. */
export function refusalMessage(nodes, nodeErrors = null) {
  const said = nodeErrorText(nodes, nodeErrors);
  if (said) return [said, "Nothing was queued and no turn was added."].join("\n");
  const bad = unavailableChoices(nodes);
  const first = bad.length
    ? `${bad[0].title}: ${bad[0].widget} "${bad[0].value}" is not installed (not among the files ComfyUI lists)`
    : "ComfyUI refused the prompt: a node's input is not valid; ComfyUI's error panel names the node";
  const more = bad.slice(1).map((b) => `${b.title}: ${b.widget} "${b.value}" is not installed`);
  return [first, ...more, "Nothing was queued and no turn was added."].join("\n");
}

/** Why a prompt that ran to its end added no turn: what ComfyUI said about a node when it queued
 * the prompt (`refused`, nodeErrorText), the files the frontend saw missing when it was sent
 * (unavailableChoices), else the other reasons. */
export function notAddedMessage(unavailable = [], refused = null) {
  const lines = (Array.isArray(unavailable) ? unavailable : []).map((b) =>
    `${b.title}: ${b.widget} "${b.value}" is not installed (not among the files ComfyUI lists)`);
  if (typeof refused === "string" && refused) lines.unshift(refused);
  if (lines.length) return [...lines, "ComfyUI ran only the parts of the graph that do not need it: no turn was added."].join("\n");
  return "The prompt ended without adding a turn: History Append did not run (nothing new to do: the same request " +
    "as the last turn, taken from ComfyUI's cache; or its inputs were refused).";
}

/** A seed different from `previous` in 0..2^32-1 (`random` in [0, 1)). */
export function nextSeed(previous, random = Math.random()) {
  const seed = Math.floor(random * 4294967295);
  return seed === previous ? (seed + 1) % 4294967296 : seed;
}

// --------------------------------------------------------------------------- the pending turn

/** The composer before anything was sent. */
export function initialComposer() {
  return { phase: "idle", request: "", sessionId: null, turn: null, promptId: null, progress: null,
    node: null, plan: null, error: null, unavailable: [], refused: null, early: [] };
}

// ComfyUI's events of a prompt. Those that come while the composer does not know its prompt's id yet
// (it learns it after queueing) are kept, and replayed once the id is known: a prompt that fails or
// finishes at once has sent every event by then.
const PROMPT_EVENTS = new Set(["execution_start", "executing", "progress", "execution_success", "execution_error",
  "execution_interrupted"]);
const EARLY_MAX = 200;

const LIVE = new Set(["queueing", "queued", "running"]);

/** True while a sent turn has not finished (the composer is busy; Cancel is offered). */
export function isBusy(c) {
  return LIVE.has(c?.phase);
}

function mine(c, data) {
  // Events of other prompts (another tab, the queue) do not touch this turn.
  return c.promptId !== null && data?.prompt_id === c.promptId;
}

/**
 * Reducer of the pending turn. Actions:
 * send {request, sessionId, turn} -> queueing; queued {promptId} -> queued; refused {message} -> error;
 * ComfyUI's events with their data: execution_start, executing, progress {value, max, node},
 * execution_success, execution_error {exception_message, node_type, node_id}, execution_interrupted;
 * plan {plan} (respec.plan); history {session_id, turns} (respec.history: the turn is there -> done);
 * dismiss -> idle.
 */
export function reduceComposer(c, action) {
  const d = action?.data ?? {};
  if (PROMPT_EVENTS.has(action?.type) && c.phase === "queueing" && c.promptId === null && d.prompt_id) {
    return { ...c, early: [...(c.early ?? []), { type: action.type, data: d }].slice(-EARLY_MAX) };
  }
  switch (action?.type) {
    case "send":
      if (isBusy(c)) return c;
      return { ...initialComposer(), phase: "queueing", request: action.request, sessionId: action.sessionId ?? null,
        turn: Number.isInteger(action.turn) ? action.turn : null,
        unavailable: Array.isArray(action.unavailable) ? action.unavailable : [] };
    case "queued": {
      if (c.phase !== "queueing") return c;
      const id = action.promptId ?? null;
      const early = (c.early ?? []).filter((e) => e.data.prompt_id === id);
      const refused = typeof action.refused === "string" && action.refused ? action.refused : null;
      return early.reduce(reduceComposer, { ...c, phase: "queued", promptId: id, refused, early: [] });
    }
    case "refused":
      return c.phase === "queueing" || c.phase === "queued" ? { ...c, phase: "error", error: String(action.message) } : c;
    case "execution_start":
      return mine(c, d) && c.phase === "queued" ? { ...c, phase: "running" } : c;
    case "executing":
      if (!mine(c, d)) return c;
      return d.node === null || d.node === undefined ? c : { ...c, phase: "running", node: String(d.node), progress: null };
    case "progress":
      if (!mine(c, d) || !Number.isFinite(d.value) || !Number.isFinite(d.max) || d.max <= 0) return c;
      return { ...c, phase: "running", progress: { value: d.value, max: d.max }, node: d.node === undefined ? c.node : String(d.node) };
    case "plan": {
      const plan = d.plan ?? d;
      if (!isBusy(c) || !plan || typeof plan !== "object") return c;
      return c.turn === null || plan.turn === c.turn ? { ...c, plan } : c;
    }
    case "execution_error":
      if (!mine(c, d) || !isBusy(c)) return c;
      return { ...c, phase: "error", error: errorText(d) };
    case "execution_interrupted":
      return mine(c, d) ? { ...c, phase: "cancelled", error: "Cancelled: the prompt was interrupted; no turn was added." } : c;
    case "execution_success":
      // History Append announces the turn (respec.history) before the prompt ends: a prompt that
      // ends without it added nothing (ComfyUI runs only the outputs whose inputs are valid, and
      // runs nothing that is cached).
      if (!mine(c, d) || c.phase === "done") return c;
      return isBusy(c) ? { ...c, phase: "error", error: notAddedMessage(c.unavailable, c.refused) } : c;
    case "history":
      // The appended turn arrived (respec.history from History Append): the real card replaces the pending one.
      if (!isBusy(c) || d.session_id !== c.sessionId || !Array.isArray(d.turns) || c.turn === null) return c;
      return d.turns.length > c.turn && d.action === "append" ? { ...c, phase: "done" } : c;
    case "dismiss":
      return isBusy(c) ? c : initialComposer();
    default:
      return c;
  }
}

/** A failed prompt's error in words, from ComfyUI's execution_error data: the node's title (the panel
 * adds `node_title` from the graph; else its type) and the exception's message. */
export function errorText(d) {
  const who = d?.node_title || d?.node_type;
  const message = String(d?.exception_message ?? "").trim() || `the prompt failed (${d?.exception_type ?? "no message"})`;
  return `${who ? `${who}: ` : ""}${message}`;
}

/** The lines of an error a card shows: its first line, then where the pack looked ("Looked in:",
 * at most three folders) and how to get the file ("How to get it:"), when the error says them; the
 * traceback is left out. */
export function errorLines(text, max = 200) {
  const lines = String(text ?? "").split(/\r?\n/);
  const stop = lines.findIndex((l) => l.startsWith("Traceback"));
  const body = (stop < 0 ? lines : lines.slice(0, stop)).map((l) => l.trim());
  const out = [firstLine(body.join("\n"), max)];
  const looked = body.findIndex((l) => /^Looked in:?$/i.test(l));
  if (looked >= 0) {
    const places = [];
    for (const l of body.slice(looked + 1)) {
      if (!l || /^(How to get it:|It is not in|Downloads are off)/i.test(l)) break;
      places.push(l);
    }
    if (places.length) out.push(`Looked in: ${places.slice(0, 3).join(", ")}${places.length > 3 ? `, … (${places.length} folders)` : ""}`);
  }
  const how = body.find((l) => /^How to get it:/i.test(l));
  if (how) out.push(how.length > max ? `${how.slice(0, max - 1)}…` : how);
  return out.filter(Boolean);
}

/** The first non-empty line of an error text, at most `max` characters (the card shows it; the
 * whole text is its tooltip). */
export function firstLine(text, max = 200) {
  const line = String(text ?? "").split(/\r?\n/).map((l) => l.trim()).find((l) => l) ?? "";
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/**
 * What the pending card says: {title, status, percent (0..100 or null), plan: [{text, title}],
 * error (the first line), errorDetail (the whole text, for a tooltip), cancel}. The plan lines come
 * only from a plan that decided something about this turn (planDecided) while it is being made: a
 * turn that failed or was cancelled never ran, and a turn-1 plan says nothing.
 */
export function pendingCard(c) {
  if (!c || c.phase === "idle" || c.phase === "done") return null;
  const pct = c.progress ? Math.round((100 * c.progress.value) / c.progress.max) : null;
  const status = {
    queueing: "sending…",
    queued: c.turn === 1 ? "starting…" : "queued: waiting for the server",
    running: c.progress ? `running · step ${c.progress.value}/${c.progress.max}` : c.node ? `running · node ${c.node}` : "running",
    error: "failed: nothing was added",
    cancelled: "cancelled: nothing was added",
  }[c.phase];
  const p = c.plan;
  const line = (text, title = null) => ({ text, title });
  const plan = isBusy(c) && planDecided(p) ? [
    line(`${p.is_restoration ? "restoration" : "not a restoration"}${p.vlm_called === true ? "" : " (no VLM call)"}`),
    Number.isInteger(p.restoration_source_id) ? line(`restore from I${p.restoration_source_id}`) : null,
    p.synthesis_instruction && p.synthesis_instruction !== c.request ? line(`→ ${p.synthesis_instruction}`) : null,
    ...fallbackWords(p).map((w) => line(w.text, w.id)),
  ].filter(Boolean) : [];
  const failed = c.phase === "error" || c.phase === "cancelled";
  return { title: c.turn === null ? "next turn" : `I${c.turn}`, request: c.request, status, percent: pct, plan,
    error: failed ? firstLine(c.error) : null, errorLines: failed ? errorLines(c.error) : [],
    errorDetail: failed ? String(c.error ?? "") : null, cancel: isBusy(c) };
}

/** The events of a finished prompt's /history status ({status_str, messages: [[type, data]]}), for a
 * prompt whose socket events were lost: its own messages, then, when none says how it ended, an end
 * that agrees with status_str ("error" with no message: say so, in words). */
export function historyEvents(status, promptId) {
  const kept = (Array.isArray(status?.messages) ? status.messages : [])
    .filter((m) => Array.isArray(m) && PROMPT_EVENTS.has(m[0]))
    .map(([type, data]) => [type, { ...(data ?? {}), prompt_id: promptId }]);
  const ended = kept.some(([type]) => ["execution_success", "execution_error", "execution_interrupted"].includes(type));
  if (!ended) {
    kept.push(status?.status_str === "success" ? ["execution_success", { prompt_id: promptId }]
      : ["execution_error", { prompt_id: promptId, exception_message: `ComfyUI reports the prompt as "${status?.status_str ?? "unknown"}" and kept no error message for it; see ComfyUI's log` }]);
  }
  return kept;
}

/** The queue entry of the prompt the composer queued: ComfyUI's /queue items ([number, prompt_id,
 * prompt, extra, outputs]) or /history entries ({prompt: [...]}) whose prompt gives node `nodeId`'s
 * `widget` the request; the newest (highest number) wins. Its prompt_id, or null. */
export function findQueuedPrompt(items, nodeId, widgetName, request) {
  let best = null;
  for (const item of Array.isArray(items) ? items : []) {
    const entry = Array.isArray(item) ? item : item?.prompt;
    if (!Array.isArray(entry)) continue;
    const [number, id, prompt] = entry;
    const inputs = prompt?.[String(nodeId)]?.inputs;
    if (inputs?.[widgetName] === request && (best === null || number > best.number)) best = { number, id };
  }
  return best?.id ?? null;
}

// --------------------------------------------------------------------------- card actions

/** Why a card's action did nothing, in words (a click must not be silent): the panel's turn count
 * no longer has turn `k` as its latest (`regenerate`), or a turn is being made (`busy`). */
export function cardActionRefusal(kind, { count, k, busy }) {
  if (busy) return `${kind}: a turn is being made; wait for it to finish, then try again.`;
  return `${kind} of turn ${k} is not possible now: the panel shows ${count} turn${count === 1 ? "" : "s"}` +
    (kind === "regenerate" ? " and only the latest turn after turn 0 can be made again" : "") + "; reload the panel.";
}

/**
 * What a card's action does, for session `sessionId` with `count` turns (0..count-1), on turn `k`:
 * undo: POST rewind {turn: k}, nothing queued; branch: POST branch {turn: k}, then follow the new
 * session, nothing queued; regenerate (latest turn only, k >= 1): POST rewind {turn: k-1}, then
 * queue the same request with a new seed. null when the action does not apply.
 * `paths` = {rewind, branch} route paths of the session (with its ?store=).
 */
export function cardAction(kind, { sessionId, count, k, instruction, paths }) {
  if (!SESSION_ID.test(sessionId ?? "") || !Number.isInteger(k) || k < 0 || !Number.isInteger(count) || k >= count) return null;
  switch (kind) {
    case "undo":
      return k < count - 1 ? { route: paths.rewind, body: { turn: k }, queue: false, follow: false, confirm: true } : null;
    case "branch":
      return { route: paths.branch, body: { turn: k }, queue: false, follow: true, confirm: false };
    case "regenerate":
      return k === count - 1 && k >= 1 && typeof instruction === "string" && instruction.trim()
        ? { route: paths.rewind, body: { turn: k - 1 }, queue: true, request: instruction, newSeed: true, follow: false, confirm: false }
        : null;
    default:
      return null;
  }
}

/** The actions offered on a card of turn `k` of a session with `count` turns. */
export function cardActions(k, count) {
  const out = [];
  if (k < count - 1) out.push("undo");
  out.push("branch");
  if (k === count - 1 && k >= 1) out.push("regenerate");
  return out;
}

/** Rows of the session picker: [{sessionId, store, edits, label, thumb}] (newest first, as listed);
 * `thumb` is the path of turn 0's image (the first image) `side` px. */
export function pickerRows(sessions, side = 48) {
  return (Array.isArray(sessions) ? sessions : []).filter((s) => SESSION_ID.test(s?.session_id ?? "")).map((s) => {
    const edits = Math.max(0, (Number.isInteger(s.turns) ? s.turns : 1) - 1);
    const store = typeof s.store === "string" && s.store ? `&store=${encodeURIComponent(s.store)}` : "";
    return { sessionId: s.session_id, store: s.store ?? null, edits,
      label: `${s.session_id} · ${edits} turn${edits === 1 ? "" : "s"}${s.parent_id ? ` (branch of ${s.parent_id})` : ""}`,
      thumb: `/respec/sessions/${s.session_id}/turns/0/image?w=${side}&h=${side}${store}` };
  });
}

/** URL path of the branch route (null for an invalid session id); `store` as listed by the server. */
export function branchPath(sessionId, store = null) {
  if (!SESSION_ID.test(sessionId ?? "")) return null;
  return `/respec/sessions/${sessionId}/branch${typeof store === "string" && store ? `?store=${encodeURIComponent(store)}` : ""}`;
}
