package blobstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Open returns the Store a URL names (CAIRN_BLOBSTORE, README.md "Configuration"):
//
//	file:///abs/path                          a FileStore rooted there (created if missing)
//	s3://bucket?endpoint=http://host:9000&region=us-east-1
//	                                          an S3Store; see ParseURL
//
// getenv supplies the environment (os.Getenv in main); Open reads nothing else.
// It does no network I/O: call Ping to check readiness. ctx is unused today and
// kept for backends whose opening needs I/O. It returns an error for an unknown
// scheme or a malformed URL.
func Open(ctx context.Context, rawURL string, getenv func(string) string) (Store, error) {
	_ = ctx
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	switch u.Scheme {
	case "file":
		if (u.Host != "" && u.Host != "localhost") || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
			return nil, errors.New("open blob store: file URL must be file:///absolute/path")
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return nil, errors.New("open blob store: file URL takes no query or fragment")
		}
		s, err := NewFile(u.Path, nil)
		if err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		return s, nil
	case "s3":
		cfg, err := ParseURL(rawURL, getenv)
		if err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		s, err := NewS3(cfg)
		if err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("open blob store: unknown scheme %q (want file or s3)", u.Scheme)
	}
}

// ParseURL parses "s3://bucket?endpoint=http://host:9000&region=us-east-1" into
// an S3Config. Query parameters, all optional:
//
//   - endpoint: the server's base URL; default AWS_ENDPOINT_URL_S3, then
//     AWS_ENDPOINT_URL, then "https://s3.<region>.amazonaws.com".
//   - region: default AWS_REGION, then AWS_DEFAULT_REGION, then "us-east-1".
//   - path_style: "true" forces path-style addressing (see S3Config.PathStyle).
//   - part_size: multipart part size in bytes (see S3Config.PartSize).
//   - spool_dir: the local folder for content over one part, "none" for none
//     (see S3Config.SpoolDir).
//
// Credentials come from getenv: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN; never from the URL, which ends up in logs. A nil getenv
// reads nothing. It returns an error for another scheme, a path after the bucket
// (prefixes are not supported), an invalid bucket name or an unknown parameter.
func ParseURL(raw string, getenv func(string) string) (S3Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	u, err := url.Parse(raw)
	if err != nil {
		return S3Config{}, fmt.Errorf("parse s3 url: %w", err)
	}
	if u.Scheme != "s3" || u.Opaque != "" {
		return S3Config{}, fmt.Errorf("parse s3 url: want s3://bucket, got scheme %q", u.Scheme)
	}
	if u.User != nil {
		return S3Config{}, errors.New("parse s3 url: credentials do not belong in the URL; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if u.Path != "" && u.Path != "/" {
		return S3Config{}, fmt.Errorf("parse s3 url: unexpected path %q after the bucket", u.Path)
	}
	if err := s3utils.CheckValidBucketNameStrict(u.Host); err != nil {
		return S3Config{}, fmt.Errorf("parse s3 url: bucket %q: %w", u.Host, err)
	}
	cfg := S3Config{
		Bucket:       u.Host,
		AccessKey:    getenv("AWS_ACCESS_KEY_ID"),
		SecretKey:    getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: getenv("AWS_SESSION_TOKEN"),
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return S3Config{}, fmt.Errorf("parse s3 url: query: %w", err)
	}
	for name, values := range q {
		if len(values) != 1 {
			return S3Config{}, fmt.Errorf("parse s3 url: parameter %q given %d times", name, len(values))
		}
		v := values[0]
		switch name {
		case "endpoint":
			cfg.Endpoint = v
		case "region":
			cfg.Region = v
		case "path_style":
			cfg.PathStyle, err = strconv.ParseBool(v)
			if err != nil {
				return S3Config{}, fmt.Errorf("parse s3 url: path_style: %w", err)
			}
		case "part_size":
			cfg.PartSize, err = strconv.ParseInt(v, 10, 64)
			if err != nil {
				return S3Config{}, fmt.Errorf("parse s3 url: part_size: %w", err)
			}
		case "spool_dir":
			cfg.SpoolDir = v
		default:
			return S3Config{}, fmt.Errorf("parse s3 url: unknown parameter %q", name)
		}
	}
	cfg.Region = firstNonEmpty(cfg.Region, getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"), "us-east-1")
	cfg.Endpoint = firstNonEmpty(cfg.Endpoint, getenv("AWS_ENDPOINT_URL_S3"), getenv("AWS_ENDPOINT_URL"),
		"https://s3."+cfg.Region+".amazonaws.com")
	return cfg, nil
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
