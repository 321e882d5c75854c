// The greet step's handler (docs/functions.md). The envelope arrives on stdin as
// one line of JSON; stdout is the step's output; stderr is the attempt's log;
// file descriptor 3 takes control messages (checkpoint, progress, error), one
// JSON object per line.
import { readFileSync, writeSync } from "node:fs";

interface Envelope {
  run_id: string;
  attempt: number;
  input: { name?: unknown } | null;
  params: { greeting?: string } | null;
}

/** Sends one control message to Cairn on file descriptor 3. */
function control(message: unknown): void {
  writeSync(Number(process.env.CAIRN_CONTROL_FD ?? 3), JSON.stringify(message) + "\n");
}

const envelope = JSON.parse(readFileSync(0, "utf8")) as Envelope;
const name = envelope.input?.name ?? "world";
const greeting = envelope.params?.greeting ?? "Hello";
if (typeof name !== "string" || name === "") {
  // Retrying would not help: fail the step at once.
  control({ error: { message: "input.name must be a non-empty string", retryable: false } });
  process.exit(1);
}
console.error(`greeting ${name} (attempt ${envelope.attempt})`);
process.stdout.write(JSON.stringify({ greeting: `${greeting}, ${name}!` }) + "\n");
