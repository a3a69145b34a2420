// Unit tests of the composer's logic (run: node --test js/tests/).
import test from "node:test";
import assert from "node:assert/strict";

import {
  branchPath, cardAction, cardActions, findQueuedPrompt, findRequestTarget, graphEdits, initialComposer, isBusy,
  cardActionRefusal, editsLostMessage, errorLines, installedLabellers, nodeErrorText, editsNotHeld, firstLine, historyEvents, keyAction, nextSeed, notAddedMessage, pendingCard, pickerRows, reduceComposer, refusalMessage, requestProblem,
  unavailableChoices, utf8Length,
} from "../lib/respec_composer.js";

const W = (name, value) => ({ name, value });

// The provenance conversational graph as LiteGraph holds it (ids as in the shipped file).
function graph({ appendMode = 0, linked = true, extraAppend = false } = {}) {
  const nodes = [
    { id: 2, type: "ReSpecHistoryStore", mode: 0, widgets: [W("mode", "rewind"), W("session_id", "my-provenance-session"), W("turn", 1)] },
    { id: 3, type: "PrimitiveStringMultiline", mode: 0, widgets: [W("value", "add sunflowers")], inputs: [] },
    { id: 7, type: "ReSpecFlux2Edit", mode: 0, widgets: [W("instruction", ""), W("seed", 42), W("steps", 30)] },
    { id: 9, type: "ReSpecHistoryAppend", mode: appendMode, widgets: [W("instruction", ""), W("meta", "{}")],
      inputs: [{ name: "history", link: 13 }, { name: "instruction", link: linked ? 15 : null }] },
  ];
  if (extraAppend) nodes.push({ id: 19, type: "ReSpecHistoryAppend", mode: 0, widgets: [W("instruction", "")], inputs: [] });
  const links = new Map([[13, { origin_id: 2, origin_slot: 0 }], [15, { origin_id: 3, origin_slot: 0 }]]);
  return { nodes, links };
}

test("the request node is found by type: the text node feeding History Append's instruction", () => {
  const { nodes, links } = graph();
  assert.deepEqual(findRequestTarget(nodes, links), { ok: true, nodeId: 3, widget: "value", appendId: 9, storeId: 2 });
  // Links given as LiteGraph's serialised arrays work the same.
  const arr = { 15: [15, 3, 0, 9, 1, "STRING"], 13: [13, 2, 0, 9, 0, "RESPEC_HISTORY"] };
  assert.equal(findRequestTarget(nodes, arr).nodeId, 3);
});

test("an unlinked instruction is History Append's own widget", () => {
  const { nodes, links } = graph({ linked: false });
  const t = findRequestTarget(nodes, links);
  assert.equal(t.ok, true);
  assert.equal(t.nodeId, 9);
  assert.equal(t.widget, "instruction");
});

test("a graph with no (active) History Append says so clearly", () => {
  for (const nodes of [[], graph({ appendMode: 4 }).nodes, graph({ appendMode: 2 }).nodes]) {
    const t = findRequestTarget(nodes, new Map());
    assert.equal(t.ok, false);
    assert.match(t.message, /no History Append \(ReSpec\) node/);
  }
});

test("a graph with several Appends (a benchmark) is refused with a reason", () => {
  const { nodes, links } = graph({ extraAppend: true });
  const t = findRequestTarget(nodes, links);
  assert.equal(t.ok, false);
  assert.match(t.message, /2 History Append/);
});

test("a request fed by a node without a text box is refused with its id and type", () => {
  const { nodes, links } = graph();
  nodes[1] = { id: 3, type: "ReSpecScenarioTurn", mode: 0, widgets: [W("turn", 1)] };
  const t = findRequestTarget(nodes, links);
  assert.equal(t.ok, false);
  assert.match(t.message, /node 3 \(ReSpecScenarioTurn\)/);
});

test("graph edits: the request, the session, a rewind mode set back to new, seeds only when regenerating", () => {
  const { nodes, links } = graph();
  const target = findRequestTarget(nodes, links);
  assert.deepEqual(graphEdits(nodes, target, "add a cat", "my-provenance-session"), [
    { nodeId: 3, widget: "value", value: "add a cat" },
    { nodeId: 2, widget: "mode", value: "new" },
  ]);
  assert.deepEqual(graphEdits(nodes, target, "add a cat", "other-b1", 7), [
    { nodeId: 3, widget: "value", value: "add a cat" },
    { nodeId: 2, widget: "session_id", value: "other-b1" },
    { nodeId: 2, widget: "mode", value: "new" },
    { nodeId: 7, widget: "seed", value: 7 },
  ]);
  nodes[0].widgets[0].value = "load";
  assert.equal(graphEdits(nodes, target, "x", "bad id!").length, 1);   // an invalid id is never written
});

test("a new seed always differs from the previous one", () => {
  assert.notEqual(nextSeed(0, 0), 0);
  assert.equal(nextSeed(5, 0), 0);
  assert.ok(nextSeed(1, 0.999999) < 4294967296);
});

test("Enter sends, Shift+Enter and IME composition type", () => {
  assert.equal(keyAction({ key: "Enter" }), "send");
  assert.equal(keyAction({ key: "Enter", shiftKey: true }), "newline");
  assert.equal(keyAction({ key: "Enter", isComposing: true }), "type");
  assert.equal(keyAction({ key: "a" }), "type");
});

test("empty and over-16-KiB requests are not sent", () => {
  assert.match(requestProblem("  "), /Type a request/);
  assert.equal(utf8Length("é"), 2);
  assert.equal(utf8Length("😀"), 4);
  assert.equal(requestProblem("é".repeat(8192)), "");
  assert.match(requestProblem("é".repeat(8192) + "x"), /16385 bytes/);
});

test("a request the server's text rule refuses is not sent either", () => {
  assert.match(requestProblem("add a \ud800 hat"), /lone surrogate \(U\+D800\) at character 6/);
  assert.match(requestProblem("add \udfff"), /lone surrogate \(U\+DFFF\)/);
  assert.match(requestProblem("add\u0000 a hat"), /NUL character at character 3/);
  assert.equal(requestProblem("add a 😀 hat"), "");
  assert.equal(requestProblem("😀".repeat(4096)), "");
});

function sent(extra = {}) {
  return reduceComposer(initialComposer(), { type: "send", request: "add a cat", sessionId: "s", turn: 2, ...extra });
}

test("pending turn: queued, then running with step progress and the plan, then done by the history event", () => {
  let c = sent();
  assert.equal(c.phase, "queueing");
  assert.equal(pendingCard(c).status, "sending…");
  assert.equal(reduceComposer(c, { type: "send", request: "again" }), c);     // busy: a second send is ignored
  c = reduceComposer(c, { type: "queued", promptId: "p1" });
  c = reduceComposer(c, { type: "progress", data: { prompt_id: "other", value: 1, max: 2 } });
  assert.equal(c.progress, null);                                               // another prompt's progress
  c = reduceComposer(c, { type: "execution_start", data: { prompt_id: "p1" } });
  c = reduceComposer(c, { type: "progress", data: { prompt_id: "p1", value: 3, max: 8, node: "7" } });
  assert.equal(pendingCard(c).status, "running · step 3/8");
  assert.equal(pendingCard(c).percent, 38);
  c = reduceComposer(c, { type: "plan", data: { plan: { turn: 1, is_restoration: true } } });
  assert.equal(c.plan, null);                                                    // a plan for another turn
  c = reduceComposer(c, { type: "plan", data: { plan: { turn: 2, is_restoration: true, restoration_source_id: 0,
    synthesis_instruction: "add a cat, keep the dog", vlm_called: false } } });
  assert.deepEqual(pendingCard(c).plan.map((l) => l.text), ["restoration (no VLM call)", "restore from I0", "→ add a cat, keep the dog"]);
  assert.equal(isBusy(c), true);
  assert.equal(pendingCard(c).cancel, true);
  c = reduceComposer(c, { type: "history", data: { session_id: "s", action: "append", turns: [{}, {}, {}] } });
  assert.equal(c.phase, "done");
  assert.equal(pendingCard(c), null);
});

test("an error shows on the card and the composer can be used again", () => {
  let c = reduceComposer(sent(), { type: "queued", promptId: "p1" });
  c = reduceComposer(c, { type: "execution_error", data: { prompt_id: "p1", node_type: "ReSpecFlux2Loader",
    exception_message: "no model file named x\n" } });
  assert.equal(c.phase, "error");
  assert.equal(pendingCard(c).error, "ReSpecFlux2Loader: no model file named x");
  assert.equal(pendingCard(c).status, "failed: nothing was added");
  assert.deepEqual(pendingCard(c).plan, []);
  assert.equal(isBusy(c), false);
  assert.equal(reduceComposer(c, { type: "dismiss" }).phase, "idle");
  // /prompt refusing the graph (validation errors) is an error too.
  assert.equal(reduceComposer(sent(), { type: "refused", message: "missing model" }).error, "missing model");
});

test("Cancel: an interrupted prompt is reported as cancelled, other prompts' events are ignored", () => {
  let c = reduceComposer(sent(), { type: "queued", promptId: "p1" });
  assert.equal(reduceComposer(c, { type: "execution_interrupted", data: { prompt_id: "p2" } }), c);
  c = reduceComposer(c, { type: "execution_interrupted", data: { prompt_id: "p1" } });
  assert.equal(c.phase, "cancelled");
  assert.match(pendingCard(c).error, /no turn was added/);
});

test("the composer's prompt is found in /queue or /history by its request", () => {
  const q = [[4, "a", { 3: { inputs: { value: "add a cat" } } }], [6, "b", { 3: { inputs: { value: "add a cat" } } }],
    [7, "c", { 3: { inputs: { value: "other" } } }]];
  assert.equal(findQueuedPrompt(q, 3, "value", "add a cat"), "b");
  assert.equal(findQueuedPrompt([{ prompt: q[0] }], 3, "value", "add a cat"), "a");
  assert.equal(findQueuedPrompt(q, 3, "value", "nothing"), null);
});

const paths = { rewind: "/respec/sessions/s/rewind", branch: "/respec/sessions/s/branch" };

test("card actions map to routes and prompts", () => {
  assert.deepEqual(cardAction("undo", { sessionId: "s", count: 4, k: 1, paths }),
    { route: paths.rewind, body: { turn: 1 }, queue: false, follow: false, confirm: true });
  assert.equal(cardAction("undo", { sessionId: "s", count: 4, k: 3, paths }), null);   // the latest turn
  assert.deepEqual(cardAction("branch", { sessionId: "s", count: 4, k: 2, paths }),
    { route: paths.branch, body: { turn: 2 }, queue: false, follow: true, confirm: false });
  assert.deepEqual(cardAction("regenerate", { sessionId: "s", count: 4, k: 3, instruction: "add a cat", paths }),
    { route: paths.rewind, body: { turn: 2 }, queue: true, request: "add a cat", newSeed: true, follow: false, confirm: false });
  assert.equal(cardAction("regenerate", { sessionId: "s", count: 4, k: 2, instruction: "x", paths }), null);
  assert.equal(cardAction("regenerate", { sessionId: "s", count: 1, k: 0, instruction: "", paths }), null);
  assert.equal(cardAction("undo", { sessionId: "../x", count: 4, k: 1, paths }), null);
  assert.deepEqual(cardActions(0, 3), ["undo", "branch"]);
  assert.deepEqual(cardActions(2, 3), ["branch", "regenerate"]);
  assert.deepEqual(cardActions(0, 1), ["branch"]);
});

test("branch path and picker rows (first image, turn count)", () => {
  assert.equal(branchPath("s", "/u/st"), "/respec/sessions/s/branch?store=%2Fu%2Fst");
  assert.equal(branchPath("a/b"), null);
  const rows = pickerRows([{ session_id: "s", turns: 3, store: "/u/st" }, { session_id: "s-b1", turns: 2, parent_id: "s" },
    { session_id: "../x", turns: 9 }], 40);
  assert.equal(rows.length, 2);
  assert.equal(rows[0].label, "s · 2 turns");
  assert.equal(rows[0].thumb, "/respec/sessions/s/turns/0/image?w=40&h=40&store=%2Fu%2Fst");
  assert.equal(rows[1].label, "s-b1 · 1 turn (branch of s)");
});

// --------------------------------------------------------------------------- plain words (issue 36)

test("a failed turn shows its error's first line (the whole text for a tooltip) and no plan line", () => {
  let c = reduceComposer(sent({ turn: 1 }), { type: "queued", promptId: "p1" });
  c = reduceComposer(c, { type: "plan", data: { plan: { turn: 1, is_restoration: true, vlm_called: true,
    restoration_source_id: 0 } } });
  assert.equal(pendingCard(c).plan.length, 2);                                   // shown while it runs
  const message = "\n  ReSpecFlux2Loader: no model file named klein.safetensors in models/diffusers\nTraceback (most recent call last):\n  File x";
  c = reduceComposer(c, { type: "execution_error", data: { prompt_id: "p1", exception_message: message } });
  const card = pendingCard(c);
  assert.equal(card.error, "ReSpecFlux2Loader: no model file named klein.safetensors in models/diffusers");
  assert.match(card.errorDetail, /Traceback/);
  assert.deepEqual(card.plan, []);                                               // the turn never ran
  assert.equal(firstLine("x".repeat(300)).length, 200);
  assert.equal(firstLine("x".repeat(300)).endsWith("…"), true);
  const refused = pendingCard(reduceComposer(sent(), { type: "refused", message: "" }));
  assert.equal(refused.error, "");
});

test("a plan that decided nothing (turn 1, a skipped turn) is not shown on a pending card", () => {
  let c = reduceComposer(sent({ turn: 1 }), { type: "queued", promptId: "p1" });
  c = reduceComposer(c, { type: "plan", data: { plan: { turn: 1, is_restoration: false, vlm_called: false,
    synthesis_instruction: "add a cat" } } });
  assert.ok(c.plan);                                                             // kept, but says nothing
  assert.deepEqual(pendingCard(c).plan, []);
  c = reduceComposer(c, { type: "plan", data: { plan: { turn: 1, is_restoration: false, vlm_called: true,
    fallbacks: ["json_parse_failed", "parse_failure_used_request"] } } });
  assert.deepEqual(pendingCard(c).plan.map((l) => [l.text, l.title]), [["not a restoration", null],
    ["the controller's answer held no JSON plan", "json_parse_failed"],
    ["your own request went to the editor", "parse_failure_used_request"]]);
});

test("a queued first turn says starting…; a later one that it waits for the server", () => {
  assert.equal(pendingCard(reduceComposer(sent({ turn: 1 }), { type: "queued", promptId: "p" })).status, "starting…");
  assert.equal(pendingCard(reduceComposer(sent({ turn: 3 }), { type: "queued", promptId: "p" })).status,
    "queued: waiting for the server");
});

test("a refused prompt names the model file that is not installed in the error's first line", () => {
  const combo = (name, value, values) => ({ name, value, type: "combo", options: { values } });
  const nodes = [
    { id: 6, type: "ReSpecFlux2Loader", title: "Flux.2 [klein] Loader (ReSpec)", mode: 0,
      widgets: [combo("model", "no-such-model", ["tiny-klein"]), W("dtype", "fp32")] },
    { id: 1, type: "LoadImage", mode: 0, widgets: [combo("image", "example.png", ["example.png"])] },
    { id: 9, type: "UNETLoader", mode: 4, widgets: [combo("unet_name", "gone.safetensors", [])] },   // bypassed
  ];
  assert.deepEqual(unavailableChoices(nodes), [{ nodeId: 6, title: "Flux.2 [klein] Loader (ReSpec)", widget: "model",
    value: "no-such-model" }]);
  const message = refusalMessage(nodes);
  assert.equal(firstLine(message),
    'Flux.2 [klein] Loader (ReSpec): model "no-such-model" is not installed (not among the files ComfyUI lists)');
  assert.match(message, /no turn was added/);
  assert.match(firstLine(refusalMessage([])), /ComfyUI refused the prompt/);
});

test("a prompt a loader refused at validation says the node's title and the loader's own words", () => {
  const nodes = [{ id: 6, type: "ReSpecFlux2Loader", title: "Flux.2 [klein] Loader (ReSpec)", mode: 0, widgets: [] }];
  const words = "Missing model weights: black-forest-labs/FLUX.2-klein-base-9B (diffusers)\nLooked in:\n  /m/diffusers\n" +
    "How to get it: download the pipeline into models/diffusers.\nIt is not in the Hugging Face cache either, and downloads are off.";
  const errors = { 6: { class_type: "ReSpecFlux2Loader", errors: [{ type: "custom_validation_failed",
    message: "Custom validation failed for node", details: `model - ${words}` }] } };
  const message = refusalMessage(nodes, errors);
  assert.equal(firstLine(message), "Flux.2 [klein] Loader (ReSpec): Missing model weights: black-forest-labs/FLUX.2-klein-base-9B (diffusers)");
  assert.deepEqual(errorLines(message).slice(1), ["Looked in: /m/diffusers", "How to get it: download the pipeline into models/diffusers."]);
  assert.match(message, /no turn was added/);
  // No node errors (an older frontend): the graph's own drop-downs say what is missing, as before.
  assert.match(firstLine(refusalMessage(nodes, {})), /ComfyUI refused the prompt/);
});

test("a prompt queued with the loader refused (ComfyUI runs the other outputs) ends in the loader's words", () => {
  const nodes = [{ id: 6, type: "ReSpecFlux2Loader", title: "Flux.2 [klein] Loader (ReSpec)", mode: 0, widgets: [] }];
  const errors = { 6: { class_type: "ReSpecFlux2Loader", errors: [{ type: "custom_validation_failed",
    details: "model - Missing model weights: black-forest-labs/FLUX.2-klein-base-9B (diffusers)\nLooked in:\n  /m/diffusers\nHow to get it: download it." }] } };
  const refused = nodeErrorText(nodes, errors);
  // The prompt ends before the panel knows its id: its events are kept and replayed on "queued".
  let c = reduceComposer(sent({ turn: 1 }), { type: "execution_success", data: { prompt_id: "p1" } });
  c = reduceComposer(c, { type: "queued", promptId: "p1", refused });
  assert.equal(c.phase, "error");
  assert.equal(firstLine(c.error), "Flux.2 [klein] Loader (ReSpec): Missing model weights: black-forest-labs/FLUX.2-klein-base-9B (diffusers)");
  assert.deepEqual(errorLines(c.error).slice(1), ["Looked in: /m/diffusers", "How to get it: download it."]);
  assert.match(c.error, /no turn was added/);
  assert.equal(nodeErrorText(nodes, null), null);
  assert.equal(nodeErrorText(nodes, { 6: { errors: [] } }), null);
});

test("a prompt that ends without History Append announcing the turn added nothing, and says why", () => {
  const missing = [{ nodeId: 6, title: "Flux.2 [klein] Loader (ReSpec)", widget: "model", value: "x" }];
  let c = reduceComposer(sent({ turn: 1, unavailable: missing }), { type: "queued", promptId: "p1" });
  c = reduceComposer(c, { type: "execution_success", data: { prompt_id: "p1" } });
  assert.equal(c.phase, "error");
  assert.equal(pendingCard(c).error, 'Flux.2 [klein] Loader (ReSpec): model "x" is not installed (not among the files ComfyUI lists)');
  assert.match(pendingCard(c).errorDetail, /no turn was added/);
  // everything cached (the same request again): said so
  c = reduceComposer(reduceComposer(sent(), { type: "queued", promptId: "p2" }), { type: "execution_success", data: { prompt_id: "p2" } });
  assert.match(c.error, /History Append did not run/);
  // the normal order: the turn's history event, then the end of the prompt
  c = reduceComposer(reduceComposer(sent(), { type: "queued", promptId: "p3" }), { type: "history",
    data: { session_id: "s", action: "append", turns: [{}, {}, {}] } });
  c = reduceComposer(c, { type: "execution_success", data: { prompt_id: "p3" } });
  assert.equal(c.phase, "done");
  assert.equal(notAddedMessage(undefined).startsWith("The prompt ended"), true);
});

// --------------------------------------------------------------------------- events before the id (issue 45)

const MISSING = "Missing model weights: no file named flux-2-klein-base-9b in diffusers\nLooked in:\n  /c/models/diffusers\n" +
  "  /c/models/diffusion_models\n  /home/u/.cache/huggingface\n  /x/4th\nHow to get it: download black-forest-labs/FLUX.2-klein-base-9B " +
  "into models/diffusers\nTraceback (most recent call last):\n  File \"x\"";

test("a prompt that fails before its id is known still ends its card in words: the early events are replayed", () => {
  // The event orders a fast-failing prompt gives: every event arrives before /queue or /history names it.
  const orders = [
    ["execution_start", "execution_error"],
    ["execution_start", "executing", "execution_error"],
    ["execution_error"],
  ];
  for (const order of orders) {
    let c = sent({ turn: 1 });
    c = reduceComposer(c, { type: "execution_start", data: { prompt_id: "other" } });   // another tab's
    for (const type of order) {
      const data = { prompt_id: "p1", node: "4" };
      if (type === "execution_error") Object.assign(data, { node_id: "4", node_type: "ReSpecFlux2Loader",
        node_title: "Flux.2 [klein] Loader (ReSpec)", exception_message: MISSING });
      c = reduceComposer(c, { type, data });
    }
    assert.equal(c.phase, "queueing");                       // nothing is decided before the id is known
    c = reduceComposer(c, { type: "queued", promptId: "p1" });
    assert.equal(c.phase, "error", order.join(","));
    const card = pendingCard(c);
    assert.equal(card.error, "Flux.2 [klein] Loader (ReSpec): Missing model weights: no file named flux-2-klein-base-9b in diffusers");
    assert.deepEqual(card.errorLines.slice(1), [
      "Looked in: /c/models/diffusers, /c/models/diffusion_models, /home/u/.cache/huggingface, … (4 folders)",
      "How to get it: download black-forest-labs/FLUX.2-klein-base-9B into models/diffusers"]);
    assert.equal(c.early.length, 0);
  }
});

test("a prompt that succeeds before its id is known, without a turn, says nothing was added; another's events do nothing", () => {
  let c = sent({ turn: 2 });
  for (const type of ["execution_start", "execution_success"]) c = reduceComposer(c, { type, data: { prompt_id: "p1" } });
  c = reduceComposer(c, { type: "execution_error", data: { prompt_id: "p9", exception_message: "not mine" } });
  c = reduceComposer(c, { type: "queued", promptId: "p1" });
  assert.equal(c.phase, "error");
  assert.match(pendingCard(c).error, /ended without adding a turn/);
  // the turn announced before the prompt's end: done, whatever order the rest comes in
  let d = sent({ turn: 1, sessionId: "s" });
  d = reduceComposer(d, { type: "execution_start", data: { prompt_id: "p2" } });
  d = reduceComposer(d, { type: "queued", promptId: "p2" });
  d = reduceComposer(d, { type: "history", data: { session_id: "s", action: "append", turns: [{}, {}] } });
  d = reduceComposer(d, { type: "execution_success", data: { prompt_id: "p2" } });
  assert.equal(d.phase, "done");
});

test("the early buffer is bounded, and the name of the node falls back to its type", () => {
  let c = sent();
  for (let i = 0; i < 500; i++) c = reduceComposer(c, { type: "progress", data: { prompt_id: `x${i}`, value: 1, max: 2 } });
  assert.equal(c.early.length, 200);
  c = reduceComposer(c, { type: "queued", promptId: "p1" });
  c = reduceComposer(c, { type: "execution_error", data: { prompt_id: "p1", node_type: "UNETLoader", exception_message: "" } });
  assert.equal(pendingCard(c).error, "UNETLoader: the prompt failed (no message)");
});

test("a finished prompt's /history status gives its own error, or words that agree with ComfyUI", () => {
  const status = { status_str: "error", messages: [["execution_start", { prompt_id: "p1" }],
    ["execution_error", { prompt_id: "p1", node_id: "4", node_type: "ReSpecFlux2Loader", exception_message: MISSING }]] };
  const events = historyEvents(status, "p1");
  assert.deepEqual(events.map(([t]) => t), ["execution_start", "execution_error"]);
  let c = reduceComposer(sent(), { type: "queued", promptId: "p1" });
  for (const [type, data] of events) c = reduceComposer(c, { type, data });
  assert.match(pendingCard(c).error, /^ReSpecFlux2Loader: Missing model weights/);
  const bare = historyEvents({ status_str: "error", messages: [] }, "p1");
  assert.equal(bare[0][0], "execution_error");
  assert.match(bare[0][1].exception_message, /"error".*ComfyUI's log/);
  assert.equal(historyEvents({ status_str: "success", messages: [] }, "p1")[0][0], "execution_success");
});

test("the composer's edits are checked against what the graph holds, and a lost one is named", () => {
  const edits = [{ nodeId: 3, widget: "value", value: "add a cat" }, { nodeId: 7, widget: "seed", value: 43 }];
  const held = { 3: "add a cat", 7: 42 };                 // Nodes 2.0 wrote the old seed back
  const lost = editsNotHeld(edits, (e) => held[e.nodeId]);
  assert.deepEqual(lost, [edits[1]]);
  assert.deepEqual(editsNotHeld(edits, (e) => e.value), []);
  assert.match(editsLostMessage(lost), /node 7's seed.*nothing was queued/);
});

test("a card action that cannot run says why instead of doing nothing", () => {
  assert.match(cardActionRefusal("regenerate", { count: 2, k: 1, busy: true }), /a turn is being made/);
  assert.match(cardActionRefusal("regenerate", { count: 0, k: 1, busy: false }), /shows 0 turns.*latest turn/);
  assert.match(cardActionRefusal("undo", { count: 1, k: 0, busy: false }), /^undo of turn 0 is not possible now: the panel shows 1 turn;/);
});

test("a loader's model drop-down says which entries are installed, without changing the values", () => {
  const v1 = { input: { required: {
    model: [["local-klein", "black-forest-labs/FLUX.2-klein-base-9B"], { default: "black-forest-labs/FLUX.2-klein-base-9B",
      respec_installed: ["local-klein"] }],
    dtype: [["auto", "fp32"], { default: "auto" }],
  } } };
  const labels = installedLabellers(v1);
  assert.deepEqual(Object.keys(labels), ["model"]);
  assert.equal(labels.model("local-klein"), "(installed) local-klein");
  assert.equal(labels.model("black-forest-labs/FLUX.2-klein-base-9B"), "(not installed) black-forest-labs/FLUX.2-klein-base-9B");
  assert.equal(labels.model(null), null);
  // The V2 definition (inputs by name) carries the same options.
  const v2 = { inputs: { model: { name: "model", type: "COMBO", respec_installed: [] } } };
  assert.equal(installedLabellers(v2).model("x"), "(not installed) x");
  assert.deepEqual(installedLabellers({ input: { required: { image: [["a.png"], {}] } } }), {});
  assert.deepEqual(installedLabellers(undefined), {});
});

