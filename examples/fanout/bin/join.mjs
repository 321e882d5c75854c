#!/usr/bin/env node
// Sums the "value" of every upstream output (deps) and prints {"sum": S, "parts": P}.
import { run } from "@cairnrun/fn";

await run(async (call) => {
  let sum = 0;
  const keys = Object.keys(call.deps);
  for (const key of keys) sum += (await call.dep(key)).value;
  return { sum, parts: keys.length };
});
