#!/usr/bin/env node
// Announces the fan-out: eight parts. Written on @cairnrun/fn, the TypeScript
// function SDK (sdk/ts; node_modules/@cairnrun/fn is a copy, which
// `make sdk-vendor` refreshes).
import { run } from "@cairnrun/fn";

await run(() => ({ parts: 8 }));
