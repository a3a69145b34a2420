// Unit tests of the panel's pure logic (run: node --test js/tests/). One test per rule.
// The files here end in .mjs so that ComfyUI, which loads every js/**/*.js into the browser,
// never loads a test.
import test from "node:test";
import assert from "node:assert/strict";

import {
  activeSessionId,
  byteSize,
  changesNote,
  fallbackWords,
  maskBounds,
  maskLegend,
  normalizeSession,
  outlineRect,
  panelMessage,
  planDecided,
  planLines,
  showingLine,
  currentPlan,
  editorReferences,
  fitContain,
  gcMessage,
  gcPath,
  gcQuestion,
  highlights,
  historyNote,
  regenerateTitle,
  imagePath,
  initialState,
  isDigest,
  isSessionId,
  maskTransform,
  overlayList,
  pointToMask,
  reduce,
  requestSide,
  rewindPath,
  rewindQuestion,
  scoreRows,
  sessionIdsFromNodes,
  sessionPath,
  sessionToFetch,
  sessionsOutdated,
  thumbnailLayout,
  tintMask,
  unloadMessage,
  turnCards,
  turnMasks,
  turnOverlays,
} from "../lib/respec_view.js";

const D = (c) => c.repeat(64); // a digest made of one hex character

function sessionData(id, version, n, plan = null) {
  const turns = [];
  for (let i = 0; i < n; i++) {
    turns.push({ index: i, instruction: i ? `edit ${i}` : "", sent_instruction: i ? `edit ${i}` : "",
      image: D("0123456789abcdef"[i % 16]), width: 640, height: 400, plan: null });
  }
  if (plan) turns[n - 1].plan = plan;
  return { session_id: id, version, turns, latest_plan: plan };
}

function run(actions, state = initialState()) {
  return actions.reduce(reduce, state);
}

// ----------------------------------------------------------------------------- validation

test("session ids follow the server's rule", () => {
  assert.ok(isSessionId("kitchen_edit-2"));
  for (const bad of ["", "a".repeat(65), "..", "a/b", "a b", "é", null, 5, "%2e%2e"]) assert.equal(isSessionId(bad), false, bad);
});

test("digests are 64 lowercase hex characters", () => {
  assert.ok(isDigest(D("a")));
  for (const bad of [D("A"), D("g"), "a".repeat(63), "../x", null]) assert.equal(isDigest(bad), false);
});

// ----------------------------------------------------------------------------- reducer

test("the reducer never changes the state it is given", () => {
  const s0 = initialState();
  const frozen = JSON.stringify(s0);
  reduce(s0, { type: "event/history", data: sessionData("a", 3, 3) });
  reduce(s0, { type: "graph/changed", sessionIds: ["a"] });
  assert.equal(JSON.stringify(s0), frozen);
});

test("unknown actions leave the state as it is", () => {
  const s0 = initialState();
  assert.equal(reduce(s0, { type: "nonsense" }), s0);
  assert.equal(reduce(s0, null), s0);
});

test("a complete history event is shown at once", () => {
  const s = run([{ type: "event/history", data: sessionData("portrait", 4, 3) }]);
  assert.equal(activeSessionId(s), "portrait");
  assert.equal(s.session.turns.length, 3);
  assert.equal(sessionToFetch(s), null);
});

test("a summary-only history event asks for a fetch of the session", () => {
  const s = run([{ type: "event/history", data: { session_id: "portrait", version: 2, turns: 3 } }]);
  assert.equal(s.session, null);
  assert.equal(sessionToFetch(s), "portrait");
});

test("a newer version heard of makes the loaded session outdated", () => {
  const s = run([
    { type: "session/loaded", data: sessionData("p", 2, 2) },
    { type: "event/history", data: { session_id: "p", version: 3 } },
  ]);
  assert.equal(sessionToFetch(s), "p");
});

test("a late response never replaces a newer session state", () => {
  const s = run([
    { type: "session/loaded", data: sessionData("p", 5, 4) },
    { type: "session/loaded", data: sessionData("p", 3, 2) },
  ]);
  assert.equal(s.session.version, 5);
  assert.equal(s.session.turns.length, 4);
});

test("a rewind event (fewer turns, higher version) replaces the session", () => {
  const s = run([
    { type: "session/loaded", data: sessionData("p", 5, 4) },
    { type: "event/history", data: sessionData("p", 6, 2) },
  ]);
  assert.equal(s.session.turns.length, 2);
});

test("the pinned session wins over the graph and the events", () => {
  const s = run([
    { type: "graph/changed", sessionIds: ["g"] },
    { type: "event/history", data: { session_id: "g", version: 1 } },
    { type: "session/pinned", sessionId: "mine" },
  ]);
  assert.equal(activeSessionId(s), "mine");
  assert.equal(activeSessionId(reduce(s, { type: "session/pinned", sessionId: null })), "g");
});

test("an event about a session the graph does not name does not steal the panel", () => {
  const s = run([
    { type: "graph/changed", sessionIds: ["g1", "g2"] },
    { type: "event/history", data: { session_id: "elsewhere", version: 1 } },
  ]);
  assert.equal(activeSessionId(s), "g1");
  const s2 = reduce(s, { type: "event/history", data: { session_id: "g2", version: 1 } });
  assert.equal(activeSessionId(s2), "g2");
});

test("with no ReSpec node in the graph the latest event's session is shown", () => {
  const s = run([{ type: "event/history", data: { session_id: "solo", version: 1 } }]);
  assert.equal(activeSessionId(s), "solo");
});

test("nothing is fetched for a session the store does not have yet", () => {
  const s = run([
    { type: "sessions/loaded", sessions: [{ session_id: "old", version: 1 }] },
    { type: "graph/changed", sessionIds: ["new-one"] },
  ]);
  assert.equal(activeSessionId(s), "new-one");
  assert.equal(sessionToFetch(s), null); // the server would answer 404 (a console error)
  assert.equal(sessionsOutdated(s), true);
});

test("an empty graph and an empty store need no request and show nothing", () => {
  const s = run([{ type: "sessions/loaded", sessions: [] }, { type: "graph/changed", sessionIds: [] }]);
  assert.equal(activeSessionId(s), null);
  assert.equal(sessionToFetch(s), null);
  assert.equal(sessionsOutdated(s), false);
  assert.deepEqual(turnCards(s), []);
});

test("invalid session ids from events and lists are ignored", () => {
  const s = run([
    { type: "sessions/loaded", sessions: [{ session_id: "../etc" }, { session_id: "ok" }, null] },
    { type: "graph/changed", sessionIds: ["a/b", "ok"] },
    { type: "session/loaded", data: { session_id: "..", version: 1, turns: [] } },
  ]);
  assert.deepEqual(s.sessions.map((x) => x.session_id), ["ok"]);
  assert.deepEqual(s.graphSessions, ["ok"]);
  assert.equal(s.session, null);
});

test("a history with no session is kept as in-graph text", () => {
  const s = run([{ type: "event/history", data: { session_id: null, version: 2, turns: [{ index: 0 }] } }]);
  assert.equal(s.eventSession, null);
  assert.equal(s.inGraph.turns.length, 1);
});

test("run events toggle the running flag", () => {
  assert.equal(run([{ type: "run/started" }]).running, true);
  assert.equal(run([{ type: "run/started" }, { type: "run/finished" }]).running, false);
});

// ----------------------------------------------------------------------------- plan and cards

const PLAN = { turn: 3, is_restoration: true, restoration_source_id: 0, identity_anchor_id: 2 };

test("the latest plan marks the restoration source and the identity anchor", () => {
  const s = run([{ type: "event/history", data: sessionData("p", 4, 4, PLAN) }]);
  const cards = turnCards(s);
  assert.deepEqual(cards[0].roles, ["restoration-source"]);
  assert.deepEqual(cards[2].roles, ["identity-anchor"]);
  assert.deepEqual(cards[1].roles, []);
  assert.deepEqual(cards[3].roles, []);
});

test("one image can be both restoration source and identity anchor", () => {
  const plan = { ...PLAN, identity_anchor_id: 0 };
  const s = run([{ type: "event/history", data: sessionData("p", 4, 4, plan) }]);
  assert.deepEqual(turnCards(s)[0].roles, ["restoration-source", "identity-anchor"]);
});

test("a live plan for the next turn overrides the stored plan until that turn is appended", () => {
  // The controller node sends {node, plan: Plan.to_dict()}; plan.turn is the turn being edited.
  let s = run([
    { type: "event/history", data: sessionData("p", 4, 4, PLAN) },
    { type: "event/plan", data: { node: "7", plan: { turn: 4, restoration_source_id: 1, identity_anchor_id: 3 } } },
  ]);
  assert.equal(currentPlan(s).restoration_source_id, 1);
  s = reduce(s, { type: "event/history", data: sessionData("p", 5, 5, PLAN) });
  assert.equal(currentPlan(s).restoration_source_id, 0);
});

test("a live plan made for another turn (another history) is not highlighted", () => {
  const s = run([
    { type: "event/history", data: sessionData("p", 4, 4, PLAN) },
    { type: "event/plan", data: { plan: { turn: 2, restoration_source_id: 1, identity_anchor_id: 1 } } },
  ]);
  assert.equal(currentPlan(s).restoration_source_id, 0);
});

test("a respec.history event is shown as it comes, with the last turn's plan", () => {
  // The one shape of respec/web.py history_event: History.summary() plus action, node and store.
  const plan = { turn: 2, is_restoration: true, restoration_source_id: 0, identity_anchor_id: 1 };
  const event = { node: "3", action: "append", session_id: "kitchen", version: 3, store: "/u/respec/sessions",
    turns: [
      { index: 0, instruction: "", sent_instruction: "", image: D("a"), width: 640, height: 480, plan: null },
      { index: 1, instruction: "add a vase", sent_instruction: "add a vase", image: D("b"), width: 640, height: 480, plan: null },
      { index: 2, instruction: "remove the vase", sent_instruction: "remove the vase; restore the table from image 0",
        image: D("c"), width: 640, height: 480, plan },
    ],
    latest_plan: { ...plan, applied_turn: 2 } };
  const s = run([{ type: "event/history", data: event }]);
  assert.equal(s.session.turns[2].width, 640);
  assert.equal(s.session.turns[2].height, 480);
  assert.equal(s.session.latest_plan.applied_turn, 2);
  assert.deepEqual(turnCards(s).map((c) => c.roles), [["restoration-source"], ["identity-anchor"], []]);
  assert.equal(s.stores.kitchen, "/u/respec/sessions");
  assert.equal(sessionToFetch(s), null);
});

test("missing or negative plan ids highlight nothing", () => {
  assert.deepEqual(highlights(null), { restorationSource: null, identityAnchor: null });
  assert.deepEqual(highlights({ restoration_source_id: -1, identity_anchor_id: "2" }),
    { restorationSource: null, identityAnchor: null });
});

test("a rewritten instruction is flagged, an unchanged one is not", () => {
  const data = sessionData("p", 3, 3);
  data.turns[2].sent_instruction = "Restore the bench from the first image";
  const cards = turnCards(run([{ type: "session/pinned", sessionId: "p" }, { type: "session/loaded", data }]));
  assert.equal(cards[1].rewritten, false);
  assert.equal(cards[2].rewritten, true);
  assert.equal(cards[2].sentInstruction, "Restore the bench from the first image");
});

test("undo is offered on every turn but the latest", () => {
  const cards = turnCards(run([{ type: "session/pinned", sessionId: "p" }, { type: "session/loaded", data: sessionData("p", 3, 3) }]));
  assert.deepEqual(cards.map((c) => c.canRewind), [true, true, false]);
  assert.equal(cards[2].latest, true);
});

test("the rewind question names the turns that go", () => {
  assert.match(rewindQuestion("p", 1, 4), /turns 2 to 3 \(2 turns\)/);
  assert.match(rewindQuestion("p", 2, 4), /turn 3 \(1 turn\)/);
});

test("a clean-up asks first with what its dry run found, and asks nothing when nothing would go", () => {
  const q = gcQuestion({ removed: 3, bytes: 3 * 1536, store: "/u/sessions", min_age_s: 3600, more: false, dry_run: true });
  assert.match(q, /^Delete 3 unused image files \(4\.5 KiB\) from the session store \/u\/sessions\?/);
  assert.match(q, /last 1 h are kept.*cannot be undone/);
  assert.match(gcQuestion({ removed: 1000, bytes: 5 * 2 ** 20, more: true }), /at least 1000 unused image files \(5\.0 MiB\)/);
  assert.equal(gcQuestion({ removed: 0, bytes: 0 }), null);
  assert.equal(gcQuestion(null), null);
});

test("after a clean-up the panel says what went, how much space it freed and whether more remain", () => {
  assert.equal(gcMessage({ removed: 1, bytes: 700, more: false }), "Removed 1 unused image file, 700 bytes freed.");
  assert.match(gcMessage({ removed: 1000, bytes: 3 * 2 ** 30, more: true }), /1000 unused image files, 3\.0 GiB freed\. More remain/);
  assert.match(gcMessage({ removed: 0 }), /^Nothing to clean up/);
  assert.deepEqual([0, 1023, 1024, 1536, 2 ** 20].map(byteSize), ["0 bytes", "1023 bytes", "1.0 KiB", "1.5 KiB", "1.0 MiB"]);
});

// ----------------------------------------------------------------------------- scores and overlays

test("scores show three decimals and NaN or null as n/a with the reason", () => {
  const rows = scoreRows({ S_restore: 0.81234, S_preserve: null, S_TC: NaN, reasons: ["R_restore is empty"] });
  assert.deepEqual(rows.map((r) => r.value), ["0.812", "n/a", "n/a", "R_restore is empty"]);
  assert.deepEqual(scoreRows(null), []);
});

test("overlays come only from mask digests, never from arbitrary URLs", () => {
  const list = overlayList({ regions: {
    R_restore: { digest: D("a"), url: "/respec/masks/" + D("a"), width: 8, height: 4 },
    R_preserve: { url: "https://evil.example/x.png" },
  } });
  assert.deepEqual(list.map((o) => o.name), ["R_restore"]);
  assert.equal(list[0].url, "/respec/masks/" + D("a"));
  assert.deepEqual(overlayList({}), []);
});

test("the image box fit keeps the aspect ratio and centres the image", () => {
  assert.deepEqual(fitContain(640, 400, 320, 320), { x: 0, y: 60, width: 320, height: 200, scale: 0.5 });
  assert.deepEqual(fitContain(100, 200, 300, 100), { x: 125, y: 0, width: 50, height: 100, scale: 0.5 });
  assert.equal(fitContain(0, 10, 100, 100).width, 0);
});

test("a mask is stretched over the whole displayed image, each axis on its own", () => {
  const rect = fitContain(640, 400, 320, 320);
  const t = maskTransform(512, 256, rect); // mask grid of another aspect (reference image size)
  assert.deepEqual(t, { sx: 320 / 512, sy: 200 / 256, x: 0, y: 60, width: 320, height: 200 });
  assert.equal(maskTransform(0, 10, rect), null);
});

test("points on the displayed image map back to mask pixels", () => {
  const rect = fitContain(640, 400, 320, 320);
  assert.deepEqual(pointToMask(0, 60, 64, 40, rect), { x: 0, y: 0 });
  assert.deepEqual(pointToMask(319.9, 259.9, 64, 40, rect), { x: 63, y: 39 });
  assert.equal(pointToMask(10, 10, 64, 40, rect), null); // in the letterbox above the image
});

test("tinting colours inside pixels and clears outside ones", () => {
  const rgba = new Uint8ClampedArray([255, 255, 255, 255, 0, 0, 0, 255]);
  const out = tintMask(rgba, [10, 20, 30], 0.5);
  assert.deepEqual([...out], [10, 20, 30, 128, 0, 0, 0, 0]);
});

test("thumbnail layout fits as many columns as the panel allows", () => {
  const l = thumbnailLayout(5, 320, { minWidth: 96, gap: 8, aspect: 4 / 3 });
  assert.equal(l.columns, 3);
  assert.equal(l.width, 101);
  assert.equal(l.height, 76);
  assert.equal(l.rows, 2);
  assert.deepEqual(l.cells[3], { x: 0, y: 84 });
});

test("thumbnail layout never has more columns than cards, nor fewer than one", () => {
  assert.equal(thumbnailLayout(2, 1000).columns, 2);
  assert.equal(thumbnailLayout(3, 10).columns, 1);
  assert.equal(thumbnailLayout(0, 300).cells.length, 0);
});

test("requested image sizes follow the screen density and stay within 16..512", () => {
  assert.equal(requestSide(100, 2), 200);
  assert.equal(requestSide(400, 3), 512);
  assert.equal(requestSide(1, 1), 16);
  assert.equal(requestSide(NaN), 512);
});

test("a judge's S_IF is added to the OCCUR scores, a new OCCUR record keeps it", () => {
  let s = run([
    { type: "event/scores", data: { S_restore: 0.5, S_preserve: 0.7, S_TC: 0.6 } },
    { type: "event/scores", data: { S_IF: 2 / 3 } },
  ]);
  assert.deepEqual(scoreRows(s.scores).map((r) => r.value), ["0.500", "0.700", "0.600", "0.667"]);
  s = reduce(s, { type: "event/scores", data: { S_restore: 0.1, S_preserve: 0.2, S_TC: 0.15 } });
  assert.equal(s.scores.S_TC, 0.15);
  assert.equal(s.scores.S_IF, 2 / 3);
});

test("the judge's own event adds S_IF without touching the OCCUR scores", () => {
  const s = run([
    { type: "event/scores", data: { S_restore: 0.5, S_preserve: 0.7, S_TC: 0.6 } },
    { type: "event/judge", data: { node: "9", S_IF: 1, score: 3 } },
  ]);
  assert.equal(s.scores.S_TC, 0.6);
  assert.equal(s.scores.S_IF, 1);
});

test("the editor's references are shown for the next turn only and dropped once it is appended", () => {
  let s = run([
    { type: "event/history", data: sessionData("p", 3, 3) },
    { type: "event/references", data: { node: "10", turn: 3, ids: [0, 2], digests: [], fallbacks: [] } },
  ]);
  assert.deepEqual(editorReferences(s).ids, [0, 2]);
  assert.equal(editorReferences(reduce(s, { type: "event/references", data: { turn: 7, ids: [1] } })), null);
  s = reduce(s, { type: "event/history", data: sessionData("p", 4, 4) });
  assert.equal(editorReferences(s), null);
});

test("editor steps and benchmark rows show as activity until the run ends", () => {
  let s = run([{ type: "run/started" }, { type: "event/editor-step", data: { editor: "klein", step: 3, total: 30 } }]);
  assert.equal(s.activity, "klein: step 3/30");
  s = reduce(s, { type: "event/bench-row", data: { key: "scn-01|respec" } });
  assert.equal(s.activity, "benchmark row scn-01|respec");
  assert.equal(reduce(s, { type: "run/finished" }).activity, null);
});

test("a session's store is passed back as an encoded query parameter", () => {
  assert.equal(sessionPath("p", "/a b/s"), "/respec/sessions/p?store=%2Fa%20b%2Fs");
  assert.equal(sessionPath("p"), "/respec/sessions/p");
  assert.equal(imagePath("p", D("b"), 64, 64, "/s&x"), `/respec/sessions/p/images/${D("b")}?w=64&h=64&store=%2Fs%26x`);
  assert.equal(rewindPath("p", "/s"), "/respec/sessions/p/rewind?store=%2Fs");
});

test("URLs are only built from valid ids and digests", () => {
  assert.equal(imagePath("p", D("b"), 100, 50), `/respec/sessions/p/images/${D("b")}?w=100&h=50`);
  assert.equal(imagePath("../p", D("b")), null);
  assert.equal(imagePath("p", "../../x"), null);
  assert.equal(rewindPath("p"), "/respec/sessions/p/rewind");
  assert.equal(rewindPath("a/b"), null);
  assert.equal(gcPath(), "/respec/sessions/gc");
  assert.equal(gcPath("/s/x y"), "/respec/sessions/gc?store=%2Fs%2Fx%20y");
});

// ----------------------------------------------------------------------------- graph

test("session ids are read from active ReSpec History nodes only", () => {
  const nodes = [
    { type: "ReSpecHistoryStore", mode: 0, widgets: [{ name: "session_id", value: "kitchen" }] },
    { type: "ReSpecHistoryStore", mode: 4, widgets: [{ name: "session_id", value: "bypassed" }] },
    { type: "LoadImage", widgets: [{ name: "session_id", value: "not-ours" }] },
    { comfyClass: "ReSpecHistoryAppend", type: "x", widgets: [{ name: "session", value: "kitchen" }] },
    { type: "ReSpecHistoryStore", widgets: [{ name: "session_id", value: "bad id" }] },
    { type: "ReSpecHistoryStore" },
  ];
  assert.deepEqual(sessionIdsFromNodes(nodes), ["kitchen"]);
  assert.deepEqual(sessionIdsFromNodes(undefined), []);
});

// ----------------------------------------------------------------------------- turn masks

test("a turn's masks keep only known names with a digest", () => {
  assert.deepEqual(turnMasks({ change: { image: D("c"), size: [8, 4] }, reveal_source: { image: "../x" }, other: { image: D("d") } }),
    { change: D("c") });
  assert.deepEqual(turnMasks(null), {});
});

test("a turn card carries its masks and its overlays load only session images by digest", () => {
  const data = sessionData("p", 3, 3);
  data.turns[2].masks = { change: { image: D("c") }, reveal_source: { image: D("e") } };
  const cards = turnCards(run([{ type: "session/pinned", sessionId: "p" }, { type: "session/loaded", data }]));
  assert.deepEqual(cards[2].masks, { change: D("c"), reveal_source: D("e") });
  assert.deepEqual(cards[1].masks, {});
  const overlays = turnOverlays("p", cards[2]);
  assert.deepEqual(overlays.map((o) => o.name), ["change", "reveal_source"]);
  assert.equal(overlays[0].url, `/respec/sessions/p/images/${D("c")}?w=512&h=512`);
  assert.deepEqual(turnOverlays("p", cards[1]), []);
  assert.deepEqual(turnOverlays("../x", cards[2]), []);
});

test("the unload message says how many models went and names any still held", () => {
  assert.equal(unloadMessage({ unloaded: 3, still_referenced: [], cached: {} }),
    "Unloaded 3 ReSpec models from ComfyUI's memory manager; the pack holds no model now.");
  assert.match(unloadMessage({ unloaded: 1, still_referenced: ["sam"], cached: { flux2: 1 } }), /still held by a running graph: sam, flux2\.$/);
});

// --------------------------------------------------------------------------- plain words (issue 36)

test("fallbacks are said in words, the identifier kept for a tooltip; the controller's deferral joins its reason", () => {
  const plan = { fallbacks: ["provenance_low_confidence", "provenance_deferred_to_controller", "restoration_region_empty"],
    meta: { provenance: { turn: 2 } } };
  assert.deepEqual(fallbackWords(plan), [
    { id: "provenance_low_confidence, provenance_deferred_to_controller",
      text: "low confidence: the editor re-drew the scene since turn 2 — the controller decides" },
    { id: "restoration_region_empty", text: "the plan named no region to restore" }]);
  assert.equal(fallbackWords({ fallbacks: ["provenance_low_confidence"], covering_turn: 1 })[0].text,
    "low confidence: the editor re-drew the scene since turn 1");              // a stored plan summary
  // a plan without the covering turn: the words still read
  assert.equal(fallbackWords({ fallbacks: ["provenance_low_confidence"] })[0].text,
    "low confidence: the editor re-drew the scene since the turn that covered it");
  assert.deepEqual(fallbackWords({ fallbacks: ["some_new_rule"] }), [{ id: "some_new_rule", text: "some new rule" }]);
  assert.deepEqual(fallbackWords(null), []);
});

test("the plan summary appears only for a plan that decided something, with its fallbacks in words", () => {
  assert.equal(planDecided({ turn: 1, is_restoration: false, vlm_called: false }), false);
  assert.deepEqual(planLines({ turn: 1, is_restoration: false, vlm_called: false }), []);
  assert.deepEqual(planLines(null), []);
  const lines = planLines({ turn: 3, is_restoration: true, vlm_called: false, controller: "provenance",
    restoration_source_id: 0, identity_anchor_id: 2, fallbacks: ["provenance_no_covering_turn"] },
  { ids: [0, 2], fallbacks: ["image_id_not_in_history_dropped"] });
  assert.deepEqual(lines.map((l) => l.text), ["Plan for turn 3: restoration (provenance, no VLM call)",
    "Restoration source: I0", "Identity anchor: I2",
    "Fallback: no earlier turn changed that part: the original (I0) is used",
    "Editor given: I0, I2 (an image id outside the history was dropped)"]);
  assert.deepEqual(lines.map((l) => l.title), [null, null, null, "provenance_no_covering_turn",
    "image_id_not_in_history_dropped"]);
  assert.ok(!lines.some((l) => /[a-z]+_[a-z]+_[a-z]+/.test(l.text)), "no raw identifier in the text");
});

test("while its first turn is queued the session is said to be starting, not to not exist", () => {
  const state = { ...initialState(), sessionsLoaded: true };
  assert.match(panelMessage(state, "my-session", null, true)[1], /"my-session" starting…/);
  assert.match(panelMessage(state, "my-session", null, false)[1], /does not exist yet/);
  assert.match(panelMessage({ ...state, eventSession: "my-session" }, "my-session", null, true)[1], /Loading session/);
  assert.deepEqual(panelMessage({ ...state, error: "boom" }, "x", null, true), ["error", "boom"]);
});

test("the session shown is said in full under the drop-down", () => {
  const state = initialState();
  assert.equal(showingLine(state, "my-provenance-session"), 'Showing "my-provenance-session" (the graph\'s session)');
  assert.match(showingLine({ ...state, pinned: "b" }, "b"), /picked/);
  assert.equal(showingLine(state, null), "");
});

test("show changes: an empty or tiny change is said or boxed, never silently invisible", () => {
  const w = 8;
  const h = 6;
  const rgba = new Uint8ClampedArray(w * h * 4);
  assert.equal(maskBounds(rgba, w, h), null);
  rgba[(2 * w + 5) * 4] = 255;                                                   // one pixel at (5, 2)
  assert.deepEqual(maskBounds(rgba, w, h), { x0: 5, y0: 2, x1: 6, y1: 3 });
  // one mask pixel on a 320x240 display is 40 px here; on a 1024 mask it would be < 1 px: at least 10 px a side
  const box = outlineRect({ x0: 500, y0: 300, x1: 501, y1: 301 }, 1024, 768, { x: 0, y: 0, width: 320, height: 240 });
  assert.ok(box.width >= 10 && box.height >= 10 && box.x >= 0 && box.x + box.width <= 320);
  assert.ok(Math.abs(box.x + box.width / 2 - 500.5 * 320 / 1024) < 0.01);
  const edge = outlineRect({ x0: 0, y0: 0, x1: 1, y1: 1 }, 1024, 768, { x: 0, y: 0, width: 320, height: 240 });
  assert.deepEqual([edge.x, edge.y], [0, 0]);                                    // kept inside the image
  assert.equal(changesNote({ change: true, reveal_source: false }), null);
  assert.match(changesNote({ change: false }), /No change recorded for this turn/);
  assert.match(changesNote({ change: null }), /could not be loaded/);
  assert.match(changesNote({}), /no change mask/);
});

test("a turn mask's legend says how much of the image it marks (from its stored record)", () => {
  const session = normalizeSession({ session_id: "s", version: 1, turns: [{ index: 0 }, { index: 1,
    masks: { change: { image: "a".repeat(64), info: { fraction: 0.047 } }, reveal_source: { image: "b".repeat(64) } } }] });
  assert.deepEqual(session.turns[1].maskFractions, { change: 0.047 });
  assert.equal(maskLegend("change", 0.047), "changed by this turn (4.7 % of the image)");
  assert.equal(maskLegend("change", 0), "changed by this turn (0 % of the image)");
  assert.equal(maskLegend("change", 0.0004), "changed by this turn (< 0.1 % of the image)");
  assert.equal(maskLegend("reveal_source", undefined), "pasted from history (Reveal Composite)");
});

test("a turn taken back from history says so in words on its card, with the pixels it took", () => {
  const words = "taken back from history: the hat added at turn 2; the editor was not run";
  const data = sessionData("p", 4, 4);
  data.turns[3].meta = { editor_run: false, editor_image_ids: [],
    post_edit: [{ step: "history_undo", applied: true, words, covering_turn: 2 }] };
  data.turns[3].masks = { change: { image: D("c") }, undo_source: { image: D("f"), info: { fraction: 0.1 } } };
  data.turns[3].sent_instruction = "";
  const cards = turnCards(run([{ type: "session/pinned", sessionId: "p" }, { type: "session/loaded", data }]));
  assert.deepEqual(cards[3].history, { text: words, applied: true });
  assert.equal(cards[3].rewritten, false);                            // the editor was sent nothing
  assert.deepEqual(cards[2].history, null);
  assert.deepEqual(turnOverlays("p", cards[3]).map((o) => o.name), ["change", "undo_source"]);
  assert.equal(maskLegend("undo_source", 0.1), "answered from history (the editor was not run) (10 % of the image)");
});

test("history first's words: a refusal is shown too, anything malformed or absent is not", () => {
  const refused = "history could not take back the hat added at turn 2 (a later turn changed it); the editor was run";
  assert.deepEqual(historyNote({ post_edit: [{ step: "reveal_composite", applied: true },
    { step: "history_undo", applied: false, words: refused }] }), { text: refused, applied: false });
  for (const meta of [null, {}, { post_edit: "x" }, { post_edit: [null, 3] },
    { post_edit: [{ step: "history_undo", applied: false, reason: "not a restoration turn" }] },
    { post_edit: [{ step: "history_undo", words: { html: "<b>" } }] },
    { post_edit: [{ step: "history_undo", words: "   " }] }]) {
    assert.equal(historyNote(meta), null, JSON.stringify(meta));
  }
  const long = historyNote({ post_edit: [{ step: "history_undo", applied: true, words: "w".repeat(5000) }] });
  assert.equal(long.text.length, 400);
  assert.ok(long.text.endsWith("…"));
});

test("Regenerate on a turn history first answered says that it is answered again, and how to get a new drawing", () => {
  const plain = "Make this turn again: same request, new seed (replaces it)";
  assert.equal(regenerateTitle(null), plain);
  assert.equal(regenerateTitle({ text: "history could not take back the hat", applied: false }), plain);
  const answered = regenerateTitle(historyNote({ post_edit: [{ step: "history_undo", applied: true,
    words: "repeated from history: turn 1 asked the same of the same picture, so its picture again" }] }));
  assert.ok(answered.startsWith(plain));
  assert.match(answered, /answers the same request again with the same picture/);
  assert.match(answered, /switch history_first off/);
});
