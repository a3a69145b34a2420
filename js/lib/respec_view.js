// Pure logic of the ReSpec panel: event -> view state, and the panel's geometry.
// No DOM and no ComfyUI imports here, so Node's test runner can exercise all of it
// (js/tests/). ComfyUI also loads this file as an extension script; it only defines exports.

export const MIN_SIDE = 16; // the server clamps requested image sizes to this range
export const MAX_SIDE = 512;
const SESSION_ID = /^[A-Za-z0-9_-]{1,64}$/;
const DIGEST = /^[0-9a-f]{64}$/;
const HISTORY_NODE = /^ReSpecHistory/;
const SESSION_WIDGETS = ["session_id", "session"];

/** True for a session id the server accepts ([A-Za-z0-9_-], 1..64 characters). */
export function isSessionId(value) {
  return typeof value === "string" && SESSION_ID.test(value);
}

/** True for an image digest (64 lowercase hex characters). */
export function isDigest(value) {
  return typeof value === "string" && DIGEST.test(value);
}

// --------------------------------------------------------------------------- state

/** The panel's state before anything is known. */
export function initialState() {
  return {
    sessions: [], // [{session_id, version, turns, updated, ...}] from GET /respec/sessions
    sessionsLoaded: false,
    pinned: null, // session id chosen in the panel; null = follow the graph and the events
    graphSessions: [], // session ids named by History nodes of the open graph
    eventSession: null, // session of the latest respec.history event
    versions: {}, // session id -> newest version heard of (events, lists, loads)
    stores: {}, // session id -> its store directory (from events and lists), sent back as ?store=
    session: null, // the loaded session: {session_id, version, turns, latest_plan}
    inGraph: null, // the latest respec.history of a history with no session (not stored)
    plan: null, // the latest respec.plan event (a plan for a turn not yet appended)
    scores: null, // the latest respec.scores payload (+ S_IF from respec.judge)
    references: null, // the latest respec.references: {turn, ids, fallbacks} the editor was given
    activity: null, // short text of what the run is doing (editor steps, benchmark rows)
    running: false,
    error: null,
  };
}

function numberOr(value, fallback) {
  return typeof value === "number" && Number.isFinite(value) ? value : fallback;
}

function bumpVersion(versions, sid, version) {
  const v = numberOr(version, null);
  if (!isSessionId(sid) || v === null || (versions[sid] ?? -1) >= v) return versions;
  return { ...versions, [sid]: v };
}

function sameList(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** A session record as the panel keeps it. GET /respec/sessions/{id} and the respec.history event
 * carry the same shape (respec/history.py History.summary). */
export function normalizeSession(data) {
  if (!data || !isSessionId(data.session_id) || !Array.isArray(data.turns)) return null;
  const turns = data.turns
    .filter((t) => t && Number.isInteger(t.index) && t.index >= 0)
    .map((t) => ({
      index: t.index,
      instruction: typeof t.instruction === "string" ? t.instruction : "",
      sent_instruction:
        typeof t.sent_instruction === "string" ? t.sent_instruction : t.instruction ?? "",
      image: isDigest(t.image) ? t.image : null,
      width: numberOr(t.width, null),
      height: numberOr(t.height, null),
      plan: t.plan && typeof t.plan === "object" ? t.plan : null,
      masks: turnMasks(t.masks),
      maskFractions: turnMaskFractions(t.masks),
      history: historyNote(t.meta),
    }))
    .sort((a, b) => a.index - b.index);
  const latest = data.latest_plan && typeof data.latest_plan === "object" ? data.latest_plan : null;
  return { session_id: data.session_id, version: numberOr(data.version, 0), turns, latest_plan: latest };
}

export const HISTORY_STEP = "history_undo"; // respec/post_edit/undo_step.py UndoStep.name
const MAX_NOTE = 400; // characters of the core's words a card shows (the record is the store's, not the panel's)

/**
 * What history first said about a turn, from its meta.post_edit entry (respec/post_edit/undo_step.py
 * undo_words): {text, applied} ("taken back from history: the hat added at turn 2; the editor was not
 * run", or why the history could not answer), or null when the turn has no such words.
 */
export function historyNote(meta) {
  const steps = Array.isArray(meta?.post_edit) ? meta.post_edit : [];
  const entry = steps.find((e) => e && typeof e === "object" && e.step === HISTORY_STEP);
  if (!entry || typeof entry.words !== "string" || entry.words.trim() === "") return null;
  const text = entry.words.length > MAX_NOTE ? `${entry.words.slice(0, MAX_NOTE - 1)}…` : entry.words;
  return { text, applied: entry.applied === true };
}

/**
 * The Regenerate button's tooltip for a card whose history note is `history` (historyNote's value):
 * a turn history first answered is answered again (the same request of the same picture), so the
 * tooltip says so and how to have the editor draw it anew.
 */
export function regenerateTitle(history) {
  const base = "Make this turn again: same request, new seed (replaces it)";
  if (!history?.applied) return base;
  return `${base}. History first answered this turn, and it answers the same request again with the same ` +
    "picture: reword the request, or switch history_first off on the Drift Guard, for a new drawing";
}

/** A turn's stored masks as {name: digest} (only the known names with a valid digest). */
export function turnMasks(masks) {
  const out = {};
  if (!masks || typeof masks !== "object") return out;
  for (const name of Object.keys(TURN_OVERLAYS)) {
    const m = masks[name];
    const digest = typeof m === "string" ? m : m?.image;
    if (isDigest(digest)) out[name] = digest;
  }
  return out;
}

/** The share of the image each stored mask marks ({name: 0..1}; its record's info.fraction), for
 * the known names; a mask without the number is left out (the panel then cannot say it is empty). */
export function turnMaskFractions(masks) {
  const out = {};
  if (!masks || typeof masks !== "object") return out;
  for (const name of Object.keys(TURN_OVERLAYS)) {
    const f = masks[name]?.info?.fraction;
    if (typeof f === "number" && Number.isFinite(f) && f >= 0) out[name] = f;
  }
  return out;
}

function withStore(stores, sid, root) {
  if (!isSessionId(sid) || typeof root !== "string" || root === "" || stores[sid] === root) return stores;
  return { ...stores, [sid]: root };
}

/** Scores after an event: an OCCUR record replaces the last one (keeping a judge's S_IF); a
 * judge-only event (S_IF) is added to it. Mirrors respec/web.py merge_scores. */
export function mergeScores(previous, data) {
  const occur = ["S_restore", "S_preserve", "S_TC"].some((k) => k in data);
  if (occur) return previous && "S_IF" in previous && !("S_IF" in data) ? { ...data, S_IF: previous.S_IF } : { ...data };
  return { ...(previous ?? {}), ...data };
}

/** True when an event carries every turn with its image, so it can be shown without a fetch. */
function isCompleteSession(data) {
  return (
    Array.isArray(data?.turns) &&
    data.turns.length > 0 &&
    data.turns.every((t) => t && Number.isInteger(t.index) && isDigest(t.image))
  );
}

/**
 * The reducer: state + action -> new state (the old one is never changed).
 * Actions: sessions/loaded {sessions}, graph/changed {sessionIds}, session/pinned {sessionId},
 * session/loaded {data}, event/history {data}, event/plan {data}, event/scores {data},
 * event/judge {data}, event/references {data}, event/editor-step {data}, event/bench-row {data},
 * run/started, run/finished, error {message}.
 */
export function reduce(state, action) {
  switch (action?.type) {
    case "sessions/loaded": {
      const sessions = (Array.isArray(action.sessions) ? action.sessions : []).filter((s) =>
        isSessionId(s?.session_id),
      );
      let versions = state.versions;
      let stores = state.stores;
      for (const s of sessions) {
        versions = bumpVersion(versions, s.session_id, s.version);
        stores = withStore(stores, s.session_id, s.store);
      }
      return { ...state, sessions, sessionsLoaded: true, versions, stores, error: null };
    }
    case "graph/changed": {
      const ids = [...new Set((action.sessionIds ?? []).filter(isSessionId))];
      return sameList(ids, state.graphSessions) ? state : { ...state, graphSessions: ids };
    }
    case "session/pinned":
      return { ...state, pinned: isSessionId(action.sessionId) ? action.sessionId : null };
    case "session/loaded": {
      const session = normalizeSession(action.data);
      if (!session) return state;
      const cur = state.session;
      // A slow response must not replace a newer one of the same session.
      if (cur && cur.session_id === session.session_id && cur.version > session.version) return state;
      const versions = bumpVersion(state.versions, session.session_id, session.version);
      const scores = action.data.scores && typeof action.data.scores === "object" && !state.scores
        ? action.data.scores
        : state.scores;
      return { ...state, session, versions, scores, error: null };
    }
    case "event/history": {
      const d = action.data ?? {};
      if (!isSessionId(d.session_id)) {
        // A history built inside one graph: nothing is stored, show its text only.
        return { ...state, inGraph: { turns: Array.isArray(d.turns) ? d.turns : [], version: d.version ?? null } };
      }
      let next = {
        ...state,
        eventSession: d.session_id,
        versions: bumpVersion(state.versions, d.session_id, d.version),
        stores: withStore(state.stores, d.session_id, d.store),
      };
      // A live plan and references were for the turn now appended (or undone): drop them.
      next.plan = null;
      next.references = null;
      if (isCompleteSession(d)) next = reduce(next, { type: "session/loaded", data: d });
      return next;
    }
    case "event/plan": {
      // The controller sends {node, plan: Plan.to_dict()}; a bare plan object is accepted too.
      const plan = action.data?.plan ?? action.data;
      return plan && typeof plan === "object" ? { ...state, plan } : state;
    }
    case "event/scores":
      return action.data && typeof action.data === "object"
        ? { ...state, scores: mergeScores(state.scores, action.data) }
        : state;
    case "event/judge": {
      // The judge's own event: add its S_IF to the scores shown (the OCCUR scores stay).
      const v = action.data?.S_IF;
      return v === undefined ? state : { ...state, scores: mergeScores(state.scores, { S_IF: v }) };
    }
    case "event/references": {
      const d = action.data ?? {};
      const ids = Array.isArray(d.ids) ? d.ids.filter((i) => Number.isInteger(i) && i >= 0) : [];
      return { ...state, references: { turn: d.turn ?? null, ids, fallbacks: Array.isArray(d.fallbacks) ? d.fallbacks : [] } };
    }
    case "event/editor-step": {
      const d = action.data ?? {};
      if (!Number.isInteger(d.step) || !Number.isInteger(d.total)) return state;
      return { ...state, activity: `${d.editor ?? "editor"}: step ${d.step}/${d.total}` };
    }
    case "event/bench-row": {
      const key = action.data?.key;
      return typeof key === "string" ? { ...state, activity: `benchmark row ${key}` } : state;
    }
    case "run/started":
      return { ...state, running: true };
    case "run/finished":
      return { ...state, running: false, activity: null };
    case "error":
      return { ...state, error: String(action.message ?? "unknown error") };
    default:
      return state;
  }
}

/**
 * The session the panel shows: the one pinned by the user; else the one the latest event was
 * about, if the graph names it (or names none); else the first one the graph names; else null.
 */
export function activeSessionId(state) {
  if (state.pinned) return state.pinned;
  const graph = state.graphSessions;
  if (state.eventSession && (graph.length === 0 || graph.includes(state.eventSession))) {
    return state.eventSession;
  }
  return graph[0] ?? null;
}

/** True when the active session exists in the store (so fetching it cannot 404). */
export function sessionExists(state, sid) {
  return state.sessions.some((s) => s.session_id === sid) || state.eventSession === sid;
}

/** The session id to fetch now, or null: the active one when missing, another, or outdated. */
export function sessionToFetch(state) {
  const sid = activeSessionId(state);
  if (!sid || !sessionExists(state, sid)) return null;
  const cur = state.session;
  if (!cur || cur.session_id !== sid) return sid;
  return (state.versions[sid] ?? -1) > cur.version ? sid : null;
}

/** True when the session list should be refreshed (an event named a session it lacks). */
export function sessionsOutdated(state) {
  const sid = activeSessionId(state);
  if (!sid) return false;
  const listed = state.sessions.find((s) => s.session_id === sid);
  return !listed || (state.versions[sid] ?? -1) > numberOr(listed.version, -1);
}

/**
 * The plan to highlight: a live plan (respec.plan) made for the next turn of the shown session
 * (its `turn` equals the number of turns so far), else the latest plan stored with a turn.
 */
export function currentPlan(state) {
  const sid = activeSessionId(state);
  const session = state.session && state.session.session_id === sid ? state.session : null;
  if (!session) return null;
  const live = state.plan;
  if (live && live.turn === session.turns.length) return live;
  return session.latest_plan;
}

/** The images the editor was given for the next turn of the shown session (respec.references),
 * as ids, or null when the latest references are about another turn or history. */
export function editorReferences(state) {
  const sid = activeSessionId(state);
  const session = state.session && state.session.session_id === sid ? state.session : null;
  const refs = state.references;
  return session && refs && refs.turn === session.turns.length ? refs : null;
}

/** True when a plan records a decision about its turn: the controller was called, or the turn is a
 * restoration (the provenance selector decides without a VLM). A turn-1 plan or a skipped turn's
 * plan ("not a restoration", no call) says nothing about the turn, so the panel does not show it. */
export function planDecided(plan) {
  return !!plan && typeof plan === "object" && (plan.vlm_called === true || plan.is_restoration === true);
}

// The fallbacks a plan records (respec/controller: parsing.py, request.py, selection.py,
// provenance_selector.py), in words; tests/test_panel_words.py checks every identifier has one.
// {k}: the covering turn from the plan's provenance record, when the plan carries it.
export const FALLBACK_WORDS = {
  json_parse_failed: "the controller's answer held no JSON plan",
  parse_failure_used_request: "your own request went to the editor",
  result_not_a_dict: "the controller's JSON was not a plan: your request went to the editor",
  synthesis_instruction_missing: "the plan had no rewritten request: yours went to the editor",
  identity_anchor_id_missing: "the plan named no identity image: the latest one is used",
  restoration_source_id_missing: "the plan named no source image: the original (I0) is used",
  restoration_region_empty: "the plan named no region to restore",
  image_ids_missing: "the plan listed no images: its source and the latest image are used",
  image_ids_entry_unreadable: "an image id the controller gave could not be read and was dropped",
  image_id_not_in_history_dropped: "an image id outside the history was dropped",
  no_valid_image_id_latest_image: "no usable image id: the editor got the latest image only",
  provenance_ambiguous: "ambiguous: more than one earlier turn could have hidden it",
  provenance_low_confidence: "low confidence: the editor re-drew the scene since {k}",
  provenance_no_covering_turn: "no earlier turn changed that part: the original (I0) is used",
  provenance_deferred_to_controller: "the controller decides",
};
const JOINS_PREVIOUS = new Set(["provenance_deferred_to_controller"]);

/** A plan's fallbacks in words: [{id, text}] (the identifier stays for a tooltip). "the controller
 * decides" joins the reason before it ("low confidence: ... since turn 2 — the controller decides");
 * an identifier this table lacks is shown with spaces for its underscores. */
export function fallbackWords(plan) {
  const ids = Array.isArray(plan?.fallbacks) ? plan.fallbacks.filter((f) => typeof f === "string") : [];
  const k = plan?.covering_turn ?? plan?.meta?.provenance?.turn;   // a stored summary / a live plan
  const covering = Number.isInteger(k) ? `turn ${k}` : "the turn that covered it";
  const out = [];
  for (const id of ids) {
    const text = (FALLBACK_WORDS[id] ?? id.replace(/_/g, " ")).replace("{k}", covering);
    if (JOINS_PREVIOUS.has(id) && out.length) {
      const prev = out[out.length - 1];
      out[out.length - 1] = { id: `${prev.id}, ${id}`, text: `${prev.text} — ${text}` };
    } else {
      out.push({ id, text });
    }
  }
  return out;
}

/** The plan summary under the latest image: [{text, title}] lines (title: a tooltip, or null).
 * `refs`: the images the editor was given for the plan's turn (editorReferences), or null. */
export function planLines(plan, refs = null) {
  if (!planDecided(plan)) return [];
  const { restorationSource, identityAnchor } = highlights(plan);
  const words = fallbackWords(plan);
  const how = plan.vlm_called === true ? "" : plan.controller === "provenance" ? " (provenance, no VLM call)" : " (no VLM call)";
  const line = (text, title = null) => ({ text, title });
  const lines = [
    line(`Plan for turn ${plan.turn ?? plan.applied_turn ?? "?"}: ${plan.is_restoration ? "restoration" : "not a restoration"}${how}`),
    plan.preservation_target ? line(`Preserve: ${plan.preservation_target}`) : null,
    restorationSource !== null ? line(`Restoration source: I${restorationSource}`) : null,
    identityAnchor !== null ? line(`Identity anchor: I${identityAnchor}`) : null,
    plan.restoration_region ? line(`Restoration region: ${plan.restoration_region}`) : null,
    ...words.map((w, i) => line(`${i === 0 ? "Fallback: " : "Also: "}${w.text}`, w.id)),
  ].filter(Boolean);
  if (refs) {
    const given = refs.ids.length ? refs.ids.map((i) => `I${i}`).join(", ") : "the current image only";
    const fw = fallbackWords({ fallbacks: refs.fallbacks });
    lines.push(line(`Editor given: ${given}${fw.length ? ` (${fw.map((w) => w.text).join("; ")})` : ""}`,
      fw.length ? fw.map((w) => w.id).join(", ") : null));
  }
  return lines;
}

/**
 * What the panel says above the images, or null: [kind ("" or "error"), text]. `starting`: the
 * composer's turn for the active session is queued or running (a first turn creates the session).
 */
export function panelMessage(state, active, session, starting = false) {
  if (state.error) return ["error", state.error];
  if (!active) {
    if (state.inGraph) return ["", "The last run built its history inside the graph (no session id), so nothing was stored: there are no turns to show or undo."];
    if (!state.sessionsLoaded) return ["", "Loading sessions…"];
    return ["", state.sessions.length
      ? "No ReSpec History node with a session id in this graph. Pick a session above to look at it."
      : "No ReSpec session yet. Add a ReSpec History Store node, give it a session id and queue the prompt: its turns appear here as they are made."];
  }
  if (!session) {
    if (sessionExists(state, active)) return ["", `Loading session "${active}"…`];
    return ["", starting
      ? `Session "${active}" starting…: its first turn is being made (the session is saved with it).`
      : `Session "${active}" does not exist yet; it is created when its first turn is made (type a request below).`];
  }
  if (session.turns.length <= 1) return ["", `Session "${active}" holds only its original image; edits appear here as turns.`];
  return null;
}

/** Which session the panel shows and why, in full (the drop-down's own text is short and may be
 * cut): "" when none. */
export function showingLine(state, active) {
  if (!active) return "";
  return state.pinned ? `Showing "${active}" (picked; "Follow the graph" goes back)` : `Showing "${active}" (the graph's session)`;
}

/** The smallest box around a mask's set pixels (red > 127 in RGBA rows of `width`):
 * {x0, y0, x1, y1} in mask pixels (x1, y1 exclusive), or null for an empty mask. */
export function maskBounds(rgba, width, height) {
  let x0 = width;
  let y0 = height;
  let x1 = -1;
  let y1 = -1;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (rgba[(y * width + x) * 4] > 127) {
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
  }
  return x1 < 0 ? null : { x0, y0, x1: x1 + 1, y1: y1 + 1 };
}

/** A mask's bounds drawn over the displayed image `target` ({x, y, width, height}): a rectangle in
 * CSS pixels, at least `minSide` px a side (so a change of a few pixels is still seen), kept inside. */
export function outlineRect(bounds, maskW, maskH, target, minSide = 10) {
  if (!bounds || !(maskW > 0) || !(maskH > 0)) return null;
  const sx = target.width / maskW;
  const sy = target.height / maskH;
  let w = Math.max(minSide, (bounds.x1 - bounds.x0) * sx);
  let h = Math.max(minSide, (bounds.y1 - bounds.y0) * sy);
  w = Math.min(w, target.width);
  h = Math.min(h, target.height);
  const cx = target.x + ((bounds.x0 + bounds.x1) / 2) * sx;
  const cy = target.y + ((bounds.y0 + bounds.y1) / 2) * sy;
  const x = Math.min(Math.max(target.x, cx - w / 2), target.x + target.width - w);
  const y = Math.min(Math.max(target.y, cy - h / 2), target.y + target.height - h);
  return { x, y, width: w, height: h };
}

/** What "show changes" says about a turn's masks, or null when there is something to draw.
 * `found`: {name: true (pixels set) | false (empty) | null (could not be loaded)} for the turn's
 * masks (TURN_OVERLAYS). */
export function changesNote(found) {
  const names = Object.keys(found ?? {});
  if (!names.length) return "No change recorded for this turn (it has no change mask).";
  if (names.some((n) => found[n] === true)) return null;
  if (names.some((n) => found[n] === null)) return "This turn's change mask could not be loaded.";
  return "No change recorded for this turn: its change mask is empty (the edit left every pixel as it was).";
}

/** The legend text of a turn mask: its label with the share of the image, e.g.
 * "changed by this turn (4.7 % of the image)". */
export function maskLegend(name, fraction) {
  const label = TURN_OVERLAYS[name]?.label ?? name;
  if (typeof fraction !== "number" || !Number.isFinite(fraction)) return label;
  const pct = fraction * 100;
  const shown = pct === 0 ? "0" : pct < 0.1 ? "< 0.1" : pct.toFixed(pct < 10 ? 1 : 0);
  return `${label} (${shown} % of the image)`;
}

/** Image ids the plan names: {restorationSource, identityAnchor} (null when absent). */
export function highlights(plan) {
  const id = (v) => (Number.isInteger(v) && v >= 0 ? v : null);
  return {
    restorationSource: id(plan?.restoration_source_id),
    identityAnchor: id(plan?.identity_anchor_id),
  };
}

/** What each turn card shows: instructions, roles in the current plan, whether undo is offered. */
export function turnCards(state) {
  const sid = activeSessionId(state);
  const session = state.session && state.session.session_id === sid ? state.session : null;
  if (!session) return [];
  const { restorationSource, identityAnchor } = highlights(currentPlan(state));
  const last = session.turns.length - 1;
  return session.turns.map((t, i) => {
    const roles = [];
    if (t.index === restorationSource) roles.push("restoration-source");
    if (t.index === identityAnchor) roles.push("identity-anchor");
    return {
      index: t.index,
      image: t.image,
      width: t.width,
      height: t.height,
      label: t.index === 0 ? "I0 (original)" : `I${t.index}`,
      instruction: t.instruction,
      sentInstruction: t.sent_instruction,
      rewritten: t.index > 0 && t.sent_instruction !== "" && t.sent_instruction !== t.instruction,
      roles,
      masks: t.masks ?? {},
      maskFractions: t.maskFractions ?? {},
      history: t.history ?? null,
      canRewind: i < last,
      latest: i === last,
    };
  });
}

const SCORE_ROWS = [
  ["S_restore", "S_restore (restoration)"],
  ["S_preserve", "S_preserve (preservation)"],
  ["S_TC", "S_TC (temporal consistency)"],
];

/** Score rows for display; NaN, null and missing values show as "n/a" with the reason if given;
 * a judge's S_IF gets a row when present. */
export function scoreRows(scores) {
  if (!scores || typeof scores !== "object") return [];
  const reasons = Array.isArray(scores.reasons) ? scores.reasons : [];
  const rows = "S_IF" in scores ? [...SCORE_ROWS, ["S_IF", "S_IF (instruction following)"]] : SCORE_ROWS;
  return rows.map(([key, label]) => {
    const v = scores[key];
    const ok = typeof v === "number" && Number.isFinite(v);
    return { key, label, value: ok ? v.toFixed(3) : "n/a", missing: !ok };
  }).concat(reasons.length ? [{ key: "reasons", label: "note", value: reasons.join("; "), missing: true }] : []);
}

/**
 * Region overlays to draw over the latest image: [{name, url, color}] from the scores'
 * `regions` ({R_restore: {url, width, height}, R_preserve: {...}}). Only /respec/masks/ URLs
 * with a digest are accepted (the panel never loads anything else from an event).
 */
export function overlayList(scores) {
  const regions = scores?.regions;
  if (!regions || typeof regions !== "object") return [];
  const colors = { R_restore: [46, 204, 113], R_preserve: [52, 152, 219] };
  const out = [];
  for (const name of ["R_restore", "R_preserve"]) {
    const r = regions[name];
    const digest = r?.digest ?? String(r?.url ?? "").split("/").pop();
    if (!isDigest(digest)) continue;
    out.push({ name, url: `/respec/masks/${digest}`, color: colors[name], width: r.width ?? null, height: r.height ?? null });
  }
  return out;
}

// A turn's own per-pixel records (stored with the turn, served as session images by digest).
export const TURN_OVERLAYS = {
  change: { label: "changed by this turn", color: [241, 196, 15] },
  reveal_source: { label: "pasted from history (Reveal Composite)", color: [155, 89, 182] },
  undo_source: { label: "answered from history (the editor was not run)", color: [26, 188, 156] },
};

/**
 * Overlays of one turn card's masks: [{name, label, url, color}], the URL a session image path of
 * the mask's digest (so only the session's own files are ever loaded).
 */
export function turnOverlays(sessionId, card, store = null) {
  const out = [];
  for (const [name, spec] of Object.entries(TURN_OVERLAYS)) {
    const url = imagePath(sessionId, card?.masks?.[name], MAX_SIDE, MAX_SIDE, store);
    if (url) out.push({ name, label: spec.label, url, color: spec.color });
  }
  return out;
}

// --------------------------------------------------------------------------- URLs

/** Pixel size to ask the server for, for an element `cssPx` wide on a `dpr` screen. */
export function requestSide(cssPx, dpr = 1) {
  const px = Math.ceil(numberOr(cssPx, MAX_SIDE) * Math.max(1, numberOr(dpr, 1)));
  return Math.max(MIN_SIDE, Math.min(MAX_SIDE, px));
}

function storeQuery(store, sep) {
  return typeof store === "string" && store !== "" ? `${sep}store=${encodeURIComponent(store)}` : "";
}

/** URL path of a session's JSON (null for an invalid id); `store` as listed by the server. */
export function sessionPath(sessionId, store = null) {
  return isSessionId(sessionId) ? `/respec/sessions/${sessionId}${storeQuery(store, "?")}` : null;
}

/** URL path of a session image by digest, fitted into w×h (null for invalid input). */
export function imagePath(sessionId, digest, w = MAX_SIDE, h = w, store = null) {
  if (!isSessionId(sessionId) || !isDigest(digest)) return null;
  return `/respec/sessions/${sessionId}/images/${digest}?w=${requestSide(w)}&h=${requestSide(h)}${storeQuery(store, "&")}`;
}

/** URL path of the rewind route (null for an invalid session id). */
export function rewindPath(sessionId, store = null) {
  return isSessionId(sessionId) ? `/respec/sessions/${sessionId}/rewind${storeQuery(store, "?")}` : null;
}

/** URL path of the clean-up route for a store as listed by the server (the default store when none). */
export function gcPath(store = null) {
  return `/respec/sessions/gc${storeQuery(store, "?")}`;
}

// --------------------------------------------------------------------------- geometry

/** The rectangle an image of srcW×srcH occupies when fitted (contained, centred) in boxW×boxH. */
export function fitContain(srcW, srcH, boxW, boxH) {
  if (!(srcW > 0 && srcH > 0 && boxW > 0 && boxH > 0)) return { x: 0, y: 0, width: 0, height: 0, scale: 0 };
  const scale = Math.min(boxW / srcW, boxH / srcH);
  const width = srcW * scale;
  const height = srcH * scale;
  return { x: (boxW - width) / 2, y: (boxH - height) / 2, width, height, scale };
}

/**
 * How a mask of maskW×maskH maps onto the displayed image rectangle: the mask covers the whole
 * image (the scorer's grid is the reference image, resized to fit), so each axis scales on its
 * own. Returns drawImage arguments {sx, sy, x, y, width, height} (scale factors per mask pixel).
 */
export function maskTransform(maskW, maskH, imageRect) {
  if (!(maskW > 0 && maskH > 0) || !(imageRect?.width > 0 && imageRect?.height > 0)) return null;
  return {
    sx: imageRect.width / maskW,
    sy: imageRect.height / maskH,
    x: imageRect.x,
    y: imageRect.y,
    width: imageRect.width,
    height: imageRect.height,
  };
}

/** Map a point of the displayed image rectangle to mask pixel coordinates (or null outside). */
export function pointToMask(px, py, maskW, maskH, imageRect) {
  const t = maskTransform(maskW, maskH, imageRect);
  if (!t) return null;
  const u = (px - t.x) / t.sx;
  const v = (py - t.y) / t.sy;
  if (u < 0 || v < 0 || u >= maskW || v >= maskH) return null;
  return { x: Math.floor(u), y: Math.floor(v) };
}

/**
 * Colour a mask for drawing: RGBA pixels (e.g. from getImageData of the mask PNG, where the red
 * channel is 255 inside) -> new RGBA pixels in `color` with `alpha` (0..1) inside, clear outside.
 */
export function tintMask(rgba, color, alpha = 0.45) {
  const out = new Uint8ClampedArray(rgba.length);
  const a = Math.round(Math.max(0, Math.min(1, alpha)) * 255);
  for (let i = 0; i + 3 < rgba.length; i += 4) {
    if (rgba[i] > 127) {
      out[i] = color[0];
      out[i + 1] = color[1];
      out[i + 2] = color[2];
      out[i + 3] = a;
    }
  }
  return out;
}

/**
 * Thumbnail grid for `count` cards in a panel `containerWidth` px wide: as many columns of at
 * least `minWidth` px as fit (at most `maxColumns`), `gap` px apart, cells `aspect` (w/h) wide.
 * Returns {columns, width, height, rows, cells: [{x, y}]} in CSS pixels.
 */
export function thumbnailLayout(count, containerWidth, { minWidth = 96, gap = 6, aspect = 4 / 3, maxColumns = 6 } = {}) {
  const n = Math.max(0, Math.floor(numberOr(count, 0)));
  const cw = Math.max(0, numberOr(containerWidth, 0));
  const fit = Math.floor((cw + gap) / (minWidth + gap));
  const columns = Math.max(1, Math.min(maxColumns, fit, Math.max(1, n)));
  const width = Math.max(1, Math.floor((cw - gap * (columns - 1)) / columns));
  const height = Math.max(1, Math.round(width / (aspect > 0 ? aspect : 1)));
  const cells = [];
  for (let i = 0; i < n; i++) {
    const c = i % columns;
    const r = Math.floor(i / columns);
    cells.push({ x: c * (width + gap), y: r * (height + gap) });
  }
  return { columns, width, height, rows: Math.ceil(n / columns), cells };
}

// --------------------------------------------------------------------------- graph

/**
 * Session ids named by ReSpec History nodes: `nodes` as [{type, widgets: [{name, value}]}]
 * (the shape of LiteGraph nodes). Nodes that are bypassed or muted (mode 2 or 4) are skipped.
 */
export function sessionIdsFromNodes(nodes) {
  const ids = [];
  for (const node of Array.isArray(nodes) ? nodes : []) {
    const type = node?.comfyClass ?? node?.type;
    if (typeof type !== "string" || !HISTORY_NODE.test(type)) continue;
    if (node.mode === 2 || node.mode === 4) continue;
    for (const w of Array.isArray(node.widgets) ? node.widgets : []) {
      if (SESSION_WIDGETS.includes(w?.name) && isSessionId(w.value) && !ids.includes(w.value)) ids.push(w.value);
    }
  }
  return ids;
}

/** Text for the confirmation dialog of a rewind to turn k of a session with `count` turns. */
export function rewindQuestion(sessionId, k, count) {
  const drop = count - 1 - k;
  const which = drop === 1 ? `turn ${k + 1}` : `turns ${k + 1} to ${count - 1}`;
  return `Rewind session "${sessionId}" to turn ${k}? This deletes ${which} (${drop} turn${drop === 1 ? "" : "s"}) from the session store; it cannot be undone.`;
}

/** A byte count for people: 1536 -> "1.5 KiB". */
export function byteSize(n) {
  let v = Number(n) || 0;
  if (v < 1024) return `${v} bytes`;
  for (const unit of ["KiB", "MiB", "GiB"]) {
    v /= 1024;
    if (v < 1024 || unit === "GiB") return `${v.toFixed(1)} ${unit}`;
  }
}

function files(n) {
  return `${n} unused image file${n === 1 ? "" : "s"}`;
}

/** The confirmation for a clean-up, from its dry run's answer (null when there is nothing to remove). */
export function gcQuestion(preview) {
  const n = Number(preview?.removed ?? 0);
  if (!n) return null;
  const hours = Math.round(Number(preview?.min_age_s ?? 3600) / 360) / 10;
  return `Delete ${preview?.more ? "at least " : ""}${files(n)} (${byteSize(preview?.bytes)}) from the session store ${preview?.store ?? ""}? `
    + `No turn uses them any more (undone turns, deleted sessions, interrupted appends); files changed in the last ${hours} h are kept. This cannot be undone.`;
}

/** The panel's message after POST /respec/sessions/gc. */
export function gcMessage(body) {
  const n = Number(body?.removed ?? 0);
  if (!n) return "Nothing to clean up: every image file is used by a turn or was changed in the last hour.";
  const more = body?.more ? " More remain: clean up again." : "";
  return `Removed ${files(n)}, ${byteSize(body?.bytes)} freed.${more}`;
}

/** The panel's message after POST /respec/models/unload: what was unloaded and what is still held. */
export function unloadMessage(body) {
  const n = Number(body?.unloaded ?? 0);
  const left = [...(body?.still_referenced ?? []), ...Object.keys(body?.cached ?? {})];
  const unloaded = `Unloaded ${n} ReSpec model${n === 1 ? "" : "s"} from ComfyUI's memory manager`;
  return left.length ? `${unloaded}; still held by a running graph: ${left.join(", ")}.` : `${unloaded}; the pack holds no model now.`;
}

