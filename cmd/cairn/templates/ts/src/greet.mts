// The greet step's handler, on @cairnrun/fn, Cairn's TypeScript function SDK
// (bundle/node_modules/@cairnrun/fn, a copy `cairn init` wrote: the bundle
// carries it). The SDK reads the envelope and answers Cairn for this handler:
// the return value is the step's output, terminal() fails the step without
// retries, any other error is retried (docs/functions.md). npm run build
// compiles this file to bundle/dist/greet.mjs.
import { run, terminal } from "@cairnrun/fn";

interface Input {
  name?: unknown;
}

interface Params {
  greeting?: string;
}

await run<Input | null, Params>((call) => {
  const name = call.input?.name ?? "world";
  const greeting = call.params?.greeting ?? "Hello";
  if (typeof name !== "string" || name === "") {
    // Retrying would not help: fail the step at once.
    throw terminal("bad_input", "input.name must be a non-empty string");
  }
  call.log(`greeting ${name} (attempt ${call.attempt})`);
  return { greeting: `${greeting}, ${name}!` };
});
