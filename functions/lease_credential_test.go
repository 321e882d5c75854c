package functions

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLeaseCredential(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	cred := LeaseCredential(key, "run-1", "fetch", 42)
	tok, err := ParseLeaseCredential(key, "run-1", "fetch", cred)
	require.NoError(t, err)
	require.EqualValues(t, 42, tok)

	tests := []struct {
		name, run, step, cred string
		key                   []byte
	}{
		{name: "other step", run: "run-1", step: "store", cred: cred, key: key},
		{name: "other run", run: "run-2", step: "fetch", cred: cred, key: key},
		{name: "other key", run: "run-1", step: "fetch", cred: cred, key: []byte("another key of enough length....")},
		{name: "token changed", run: "run-1", step: "fetch", cred: "43" + cred[2:], key: key},
		{name: "no signature", run: "run-1", step: "fetch", cred: "42", key: key},
		{name: "garbage", run: "run-1", step: "fetch", cred: "x.y", key: key},
		{name: "no key", run: "run-1", step: "fetch", cred: cred, key: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseLeaseCredential(tt.key, tt.run, tt.step, tt.cred)
			require.ErrorIs(t, err, ErrBadCredential)
		})
	}
}
