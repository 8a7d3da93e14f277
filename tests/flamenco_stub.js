// A minimal stand-in for Flamenco Manager's job-compiler runtime (tests/test_farm_flamenco.py).
//
// Flamenco runs a job-type script's top level, then compileJob(job) with the submitted
// settings, through `author.Task(name, type)`, `author.Command(type, params)`,
// `task.addCommand`, `task.addDependency` and `job.addTask`. This stand-in provides just
// those, records what the script authors, and prints it as JSON:
//
//   node flamenco_stub.js JOB_TYPE_SCRIPT.js '{"setting": value, ...}'
//
// Settings missing from the JSON get the JOB_TYPE default (as the Blender add-on fills
// them in when it submits). stdout: {"job_type": {...}, "tasks": [{name, type, commands:
// [{type, params}], dependencies: [names]}]}; a compileJob error prints {"error": message}
// and exits 1. It is not Flamenco: a real Manager was not run.
"use strict";
const fs = require("fs");
const vm = require("vm");

const [script, settingsJson] = process.argv.slice(2);
const author = {
    Task(name, type) {
        return {
            name, type, commands: [], dependencies: [],
            addCommand(cmd) { this.commands.push(cmd); },
            addDependency(task) {
                if (!task || typeof task.name !== "string") throw new Error("addDependency: not a task");
                this.dependencies.push(task);
            },
        };
    },
    Command(type, params) { return { type, params }; },
};
const context = vm.createContext({ author, print: (...a) => console.error(...a), console });
vm.runInContext(fs.readFileSync(script, "utf8") + "\n;globalThis.__jt = JOB_TYPE; globalThis.__cj = compileJob;",
                context, { filename: script });
const jobType = context.__jt;
const settings = {};
for (const s of jobType.settings) if ("default" in s) settings[s.key] = s.default;
Object.assign(settings, JSON.parse(settingsJson || "{}"));
const tasks = [];
const job = { settings, addTask(t) { tasks.push(t); } };
try {
    context.__cj(job);
} catch (e) {
    console.log(JSON.stringify({ error: String(e && e.message ? e.message : e) }));
    process.exit(1);
}
const names = new Set(tasks.map((t) => t.name));
for (const t of tasks) for (const d of t.dependencies) {
    if (!names.has(d.name)) throw new Error(`task ${t.name} depends on ${d.name}, which was never added`);
}
console.log(JSON.stringify({
    job_type: jobType,
    tasks: tasks.map((t) => ({ name: t.name, type: t.type, commands: t.commands,
                               dependencies: t.dependencies.map((d) => d.name) })),
}));
