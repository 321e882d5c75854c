package fn

import (
	"errors"
	"net/url"
)

// redactErr drops the URL from a transport error: presigned, checkpoint and
// callback URLs are credentials, and must not reach a message.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
