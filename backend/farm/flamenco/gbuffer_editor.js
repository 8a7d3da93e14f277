// SPDX-License-Identifier: GPL-3.0-or-later
//
// G-Buffer Editor job type for Flamenco 3 (Blender's render farm manager).
// Install: copy this file into the `scripts/` folder next to the flamenco-manager
// executable and restart the Manager (docs/farm.md). Submitted jobs decompose footage
// into G-buffer EXRs and/or restyle them, one task per frame chunk:
//
//   anchors:        PYTHON BACKEND_ROOT/backend farm anchors INPUT --out GBUFFER_DIR --frames FIRST-LAST
//   decompose A-B:  {blender} {blenderArgs} FILE.blend --command gbuffer_editor decompose
//                   INPUT --out GBUFFER_DIR --frames A-B --warmup K --manifest-part
//                   --depth-anchors GBUFFER_DIR/.gbuffer_depth_anchors.npz [...]
//   merge:          PYTHON BACKEND_ROOT/backend farm merge GBUFFER_DIR --frames FIRST-LAST
//   restyle A-B:    ... --command gbuffer_editor restyle GBUFFER_DIR --no-edits --out RESTYLE_DIR
//                   --frames A-B --warmup K --manifest-part --prompt P [...]
//   merge:          PYTHON BACKEND_ROOT/backend farm merge RESTYLE_DIR --frames FIRST-LAST
//
// With runner "cli" the chunk tasks run `PYTHON BACKEND_ROOT/backend decompose|restyle ...`
// instead of Blender. Python runs through Flamenco's `exec` command (Flamenco >= 3.3);
// Blender through `blender-render` ({exe} {exeArgs} {argsBefore} {blendfile} {args}) with
// the submitted .blend as `blendfile` (Workers before 3.5 reject an empty one).
// The anchors task (decompose with an overlap, setting depth_anchors) fixes the depth
// scale of every frame once, so parallel chunks agree with an unchunked run (docs/farm_ray.md).
// A chunk computes K (overlap) frames before its first frame, never written, so its
// temporal state equals `python -m backend farm local ... --chunk N --overlap K`. With
// `chain`, a chunk has no --warmup and depends on the previous chunk: it continues from
// that chunk's last frame file, as `--overlap chain` (byte-identical to an unchunked run).
// Tested under Node against a stand-in for Flamenco's authoring API
// (tests/flamenco_stub.js); not run on a real Flamenco Manager.

const JOB_TYPE = {
    label: "G-Buffer Editor",
    description: "Decompose footage into G-buffer EXRs and/or restyle them, in frame chunks",
    settings: [
        { key: "job", type: "string", required: true, default: "decompose+restyle",
          choices: ["decompose", "restyle", "decompose+restyle"],
          description: "decompose (footage -> G-buffers), restyle (G-buffers -> look), or both" },
        { key: "input", type: "string", subtype: "file_path", required: false, default: "",
          description: "Footage: a movie, an image folder or a pattern (decompose)" },
        { key: "gbuffer_dir", type: "string", subtype: "dir_path", required: true,
          description: "G-buffer folder: decompose output, restyle input" },
        { key: "restyle_dir", type: "string", subtype: "dir_path", required: false, default: "",
          description: "Restyle output folder" },
        { key: "frames", type: "string", required: true,
          eval: "f'{C.scene.frame_start}-{C.scene.frame_end}'",
          description: "Source frame range A-B (1..N for a movie)" },
        { key: "chunk_size", type: "int32", default: 24,
          description: "Frames per task; at least the overlap" },
        { key: "overlap", type: "int32", default: 4,
          description: "Temporal overlap: frames computed (not written) before each chunk" },
        { key: "chain", type: "bool", default: false,
          description: "Each chunk continues from the previous chunk's last frame (no overlap): " +
                       "chunks run one after another, byte-identical to an unchunked run" },
        { key: "estimator", type: "string", default: "embedded", description: "Decompose estimator" },
        { key: "processing_resolution", type: "int32", default: -1,
          description: "Long side the estimator computes at (0 = full size, -1 = its default)" },
        { key: "decompose_args", type: "string", default: "", description: "Extra decompose options" },
        { key: "prompt", type: "string", default: "", description: "Restyle look, e.g. 'dense fog'" },
        { key: "renderer", type: "string", default: "embedded", description: "Restyle renderer" },
        { key: "restyle_args", type: "string", default: "", description: "Extra restyle options" },
        { key: "runner", type: "string", default: "blender", choices: ["blender", "cli"],
          description: "blender: the extension's headless command; cli: Python + BACKEND_ROOT/backend" },
        { key: "python", type: "string", default: "python3",
          description: "Python 3.11 with the backend's packages (merge tasks; chunk tasks with runner cli)" },
        { key: "backend_root", type: "string", subtype: "dir_path", required: true,
          description: "Folder holding backend/ (the repository or the installed extension)" },
        { key: "depth_anchors", type: "bool", default: true,
          description: "Before the decompose chunks, one task fixes every frame's depth scale (an anchor " +
                       "pass over the whole range) so parallel chunks agree with an unchunked run" },
        // Flamenco 3 accepts only these `visible` values: visible, hidden, submission, web
        { key: "blender_cmd", type: "string", default: "{blender}", visible: "hidden" },
        { key: "blender_args", type: "string", default: "{blenderArgs}", visible: "hidden" },
        // the Blender add-on fills it in with the submitted file
        { key: "blendfile", type: "string", required: false, default: "", visible: "web",
          description: "The submitted .blend, opened by the blender runner" },
    ],
};

function compileJob(job) {
    const s = job.settings;
    const plan = gbufferPlan(s);
    const stages = s.job === "decompose+restyle" ? ["decompose", "restyle"] : [s.job];
    let previousMerge = null;
    for (const stage of stages) {
        const chunkTasks = [];
        let anchors = null;
        if (stage === "decompose" && useAnchors(s)) {
            anchors = author.Task("anchors-decompose", "misc");
            anchors.addCommand(pythonCommand(s, ["farm", "anchors", s.input, "--out", s.gbuffer_dir, "--frames",
                                                 `${plan.first}-${plan.last}`, ...decomposeOptions(s)]));
            job.addTask(anchors);
        }
        for (const c of plan.chunks) {
            const task = author.Task(`${stage}-${c.first}-${c.last}`, s.runner === "blender" ? "blender" : "misc");
            task.addCommand(chunkCommand(s, stage, c));
            if (previousMerge) task.addDependency(previousMerge);
            if (anchors) task.addDependency(anchors);
            if (s.chain && chunkTasks.length) task.addDependency(chunkTasks[chunkTasks.length - 1]);
            job.addTask(task);
            chunkTasks.push(task);
        }
        const merge = author.Task(`merge-${stage}`, "misc");
        merge.addCommand(pythonCommand(s, ["farm", "merge", outDir(s, stage), "--frames",
                                           `${plan.first}-${plan.last}`]));
        for (const t of chunkTasks) merge.addDependency(t);
        job.addTask(merge);
        previousMerge = merge;
    }
}

// Bad input refused at submission: one line each (Flamenco shows the error to the submitter).
function gbufferPlan(s) {
    const fail = (msg) => { throw new Error(`G-Buffer Editor: ${msg}`); };
    if (!["decompose", "restyle", "decompose+restyle"].includes(s.job)) fail(`unknown job '${s.job}'`);
    const m = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(String(s.frames));
    if (!m) fail(`frames '${s.frames}': expected one range A-B, e.g. 1-96`);
    const first = parseInt(m[1], 10), last = parseInt(m[2], 10);
    if (first > last) fail(`frames ${first}-${last} is empty (A > B)`);
    const chunk = s.chunk_size, overlap = s.overlap;
    if (!Number.isInteger(chunk) || chunk < 1) fail(`chunk_size ${chunk}: must be at least 1`);
    if (!Number.isInteger(overlap) || overlap < 0) fail(`overlap ${overlap}: must be 0 or more`);
    if (!s.chain && chunk < overlap) {
        fail(`chunk_size ${chunk} is below the temporal overlap ${overlap}; use a chunk of at least ` +
             `${overlap} frames (or a smaller overlap)`);
    }
    if (s.job !== "restyle" && !s.input) fail("input (footage) is required to decompose");
    if (s.job !== "decompose" && !s.restyle_dir) fail("restyle_dir is required to restyle");
    if (!s.backend_root) fail("backend_root (the folder holding backend/) is required for the merge tasks");
    if (!["blender", "cli"].includes(s.runner)) fail(`unknown runner '${s.runner}': blender or cli`);
    if (s.runner === "blender" && !s.blendfile) {
        // Flamenco Workers before 3.5 reject a blender-render command without a blend file
        fail("the blender runner needs the submitted .blend (setting blendfile; the Blender add-on sets it); " +
             "submit from Blender or use runner cli");
    }
    const chunks = [];
    for (let a = first; a <= last; a += chunk) chunks.push({ first: a, last: Math.min(a + chunk - 1, last) });
    return { first, last, chunks };
}

function outDir(s, stage) {
    return stage === "decompose" ? s.gbuffer_dir : s.restyle_dir;
}

function splitArgs(text) {
    return String(text || "").split(/\s+/).filter((a) => a.length > 0);
}

// a parallel decompose (not chained) aligns its depth to the anchors task's file
function useAnchors(s) {
    return !s.chain && s.depth_anchors !== false;
}

function anchorsFile(s) {
    return `${String(s.gbuffer_dir).replace(/[\\/]+$/, "")}/.gbuffer_depth_anchors.npz`;
}

// the decompose options the anchors task and every decompose chunk share
function decomposeOptions(s) {
    const args = ["--estimator", s.estimator];
    if (s.processing_resolution >= 0) args.push("--processing-resolution", String(s.processing_resolution));
    return [...args, ...splitArgs(s.decompose_args)];
}

function chunkArgs(s, stage, c) {
    const args = ["--out", outDir(s, stage), "--frames", `${c.first}-${c.last}`,
                  ...(s.chain ? [] : ["--warmup", String(s.overlap)]), "--manifest-part"];
    if (stage === "decompose") {
        const anchors = useAnchors(s) ? ["--depth-anchors", anchorsFile(s)] : [];
        return [s.input, ...args, ...anchors, ...decomposeOptions(s)];
    }
    args.push("--renderer", s.renderer);
    if (s.prompt) args.push("--prompt", s.prompt);
    return [s.gbuffer_dir, ...args, ...splitArgs(s.restyle_args)];
}

function chunkCommand(s, stage, c) {
    const [src, ...rest] = chunkArgs(s, stage, c);
    if (s.runner === "cli") return pythonCommand(s, [stage, src, ...rest]);
    return author.Command("blender-render", {
        exe: s.blender_cmd,
        exeArgs: s.blender_args,
        argsBefore: [],
        blendfile: s.blendfile,
        // restyle: --no-edits, the headless material-edit bake is not chunk-aware (docs/farm.md)
        args: ["--command", "gbuffer_editor", stage, src, ...(stage === "restyle" ? ["--no-edits"] : []), ...rest],
    });
}

// `python BACKEND_ROOT/backend ARGS` as Flamenco's `exec` command (Flamenco >= 3.3: run an
// executable directly, no shell).
function pythonCommand(s, args) {
    const root = String(s.backend_root).replace(/[\\/]+$/, "");
    return author.Command("exec", { exe: s.python, args: [`${root}/backend`, ...args] });
}
