package blobstore

// SetPartsPerSize makes s's uploads under keys of their own grow their parts
// every n parts (ownPartSize), so that a test sees parts grow within a few.
func SetPartsPerSize(s *S3Store, n int) { s.partsPerSize = n }
