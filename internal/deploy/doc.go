// Package deploy is the one home of "deploy a bundle": Register reads a bundle
// archive, validates it (package bundle), stores its canonical archive (package
// blobstore), builds the step layout every run of the version starts with, and
// registers the version (package catalog). The API's upload operation calls it, and
// so do the tests that need a deployed version, so that they take production's path.
//
// # Why internal/deploy
//
// Deploying is a use-case over catalog, blobstore and bundle, not a part of any of
// them: catalog and blobstore import nothing of ours, and bundle imports nothing of
// Cairn's. Its callers sit above it: api (the upload operation) and the tests of
// runtime and api. Dependencies thus keep pointing one way:
//
//	cmd → api, runtime → deploy → catalog, blobstore, bundle
//
// It lives under internal/ rather than at the top level because it is no public
// surface: users deploy through the HTTP API (`cairn deploy`, package client), and
// the top-level folders are the ones README.md's "Layout" lists. A Go program outside this
// module that imported it would bypass the API's authentication and limits.
package deploy
