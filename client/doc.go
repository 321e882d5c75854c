// Package client is the Go client of the Cairn API.
//
// [New] returns a [Client]: every operation of the API, generated from the OpenAPI
// document by oapi-codegen (GetRunWithResponse, ListStepsWithResponse, ...; the
// streaming ones as raw *http.Response), plus what a program needs around them:
//
//   - [Client.UploadBundle] and [Client.CreateRun] to deploy a bundle and start a run;
//   - [Client.WaitRun] to wait until a run has ended;
//   - [Client.FollowRun] to get a run's events as they happen, over server-sent
//     events, resuming with Last-Event-ID after a dropped connection;
//   - iterators over every paginated list, following next_cursor: [Client.Runs],
//     [Client.Workflows], [Client.Versions], [Client.Events] (and, a page at a time,
//     [Client.RunPages], ...).
//
// Every answer of the server outside 2xx is an error of type *[Problem] (an RFC 9457
// problem detail): switch on its Code, or use [ProblemCode]. [Retryable] tells an
// error that may pass (network trouble, 5xx, 429) from a refusal.
//
// A Client is safe for concurrent use. Bound calls with their ctx: the default HTTP
// client has no timeout, as streams last as long as runs.
//
// # Start a run and wait for it
//
//	cl, err := client.New("http://127.0.0.1:8080", os.Getenv("CAIRN_TOKEN"))
//	if err != nil {
//		return err
//	}
//	run, err := cl.CreateRun(ctx, "hello", client.StartRunBody{Input: map[string]any{"name": "ada"}}, "")
//	if err != nil {
//		return err
//	}
//	id, err := uuid.Parse(run.Id)
//	if err != nil {
//		return err
//	}
//	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
//	defer cancel()
//	run, err = cl.WaitRun(ctx, id, client.WaitOptions{})
//	if err != nil {
//		return err // the wait failed (ctx ended, the server refused, ...)
//	}
//	if run.Status != client.RunStatusSucceeded {
//		return fmt.Errorf("run %s %s: %v", run.Id, run.Status, run.Error)
//	}
//
// # Follow a run's events
//
// FollowRun calls its function once for each event, in order, until the run's final
// event; a stream that drops is reopened after the last event delivered.
//
//	err = cl.FollowRun(ctx, id, 0, func(ev *client.Event) error {
//		fmt.Println(ev.Seq, ev.Type)
//		return nil // an error stops following and is returned
//	}, client.FollowOptions{})
//
// # List
//
// The iterators fetch one page at a time, as the loop goes; breaking out stops
// fetching. An error is yielded once and ends the loop.
//
//	status := client.ListRunsParamsStatusFailed
//	for run, err := range cl.Runs(ctx, &client.ListRunsParams{Status: &status}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(run.Id, run.Workflow, run.CreatedAt)
//	}
package client
