// Package blobstore is Cairn's content-addressed object store: bundles, step
// outputs, checkpoints and logs too large for a database row.
//
// An object lives under "<kind>/sha256/<hex>", where hex is the sha256 of its
// bytes (or a caller-chosen digest, for bundles addressed by their canonical
// tree). Objects never change, so a Put of content already stored is a no-op
// and readers never need to coordinate with writers.
//
// Two backends implement Store:
//
//   - FileStore keeps objects in a local directory (cairn dev, tests). Puts go
//     through a synced temporary file renamed into place; the content type sits
//     in a JSON sidecar next to each object.
//   - S3Store keeps them in an S3-compatible bucket through minio-go. Content
//     that fits in one part (8 MiB by default) is hashed in memory and written
//     to its final key directly. Larger content is written once too: a payload
//     whose writer passes an index (PutOptions.Index, the catalog) is streamed
//     as a multipart upload to a key of its own, "<kind>/u/<hex>", as it is
//     hashed, and the index records which object holds which digest; other
//     content is spooled to local disk while hashed, then uploaded to its
//     content address.
//
// Both stream: memory per Put is bounded (one part for S3, a copy buffer for
// files) whatever the size of the content, and its length need not be known.
//
// Payloads (outputs, checkpoints, signals' and callbacks' bodies) are stored
// through PutPayload, the one rule for keeping a value inline in a catalog row or
// storing it as an object; a stored object is named by a {"$blob": …} reference
// (Ref), written by Ref.JSON and read only by ParseRef.
//
// Open builds a Store from a CAIRN_BLOBSTORE URL. The conformance suite in
// blobstoretest runs the same tests against every backend.
package blobstore
