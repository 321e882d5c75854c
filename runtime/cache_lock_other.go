//go:build !unix

package runtime

import "os"

// lockCacheDir cannot tell a shared cache directory here: the cache is taken
// as this dispatcher's own.
func lockCacheDir(string) (*os.File, bool, error) { return nil, true, nil }
