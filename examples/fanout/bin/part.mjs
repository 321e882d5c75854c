#!/usr/bin/env node
// Prints {"n": N, "value": N*N} where N comes from the step's key, part-N.
import { run, terminal } from "@cairnrun/fn";

await run((call) => {
  const n = Number(call.step.replace(/^part-/, ""));
  if (!Number.isInteger(n)) throw terminal("bad_step", `step ${call.step} is not part-N`);
  call.log(`part ${n} of run ${call.runId} (attempt ${call.attempt})`);
  return { n, value: n * n };
});
