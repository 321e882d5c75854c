package blobstore

// SetOwnSmallParts sets how many parts of half the part size a Put under a key
// of its own uploads before parts of the part size (s3OwnSmallParts), so that
// a test sees the change without gigabytes of content.
func SetOwnSmallParts(s *S3Store, n int) { s.ownSmallParts = n }
