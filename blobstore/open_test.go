package blobstore_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	creds := map[string]string{
		"AWS_ACCESS_KEY_ID":     "AKID",
		"AWS_SECRET_ACCESS_KEY": "SECRET",
		"AWS_SESSION_TOKEN":     "TOKEN",
	}
	tests := []struct {
		name string
		raw  string
		env  map[string]string
		want blobstore.S3Config
	}{
		{
			name: "DesignForm",
			raw:  "s3://cairn?endpoint=http://127.0.0.1:9000&region=eu-west-1",
			env:  creds,
			want: blobstore.S3Config{Endpoint: "http://127.0.0.1:9000", Bucket: "cairn", Region: "eu-west-1",
				AccessKey: "AKID", SecretKey: "SECRET", SessionToken: "TOKEN"},
		},
		{
			name: "EscapedEndpointAndOptions",
			raw:  "s3://cairn-blobs/?endpoint=http%3A%2F%2Fminio%3A9000&path_style=true&part_size=8388608",
			want: blobstore.S3Config{Endpoint: "http://minio:9000", Bucket: "cairn-blobs", Region: "us-east-1",
				PathStyle: true, PartSize: 8 << 20},
		},
		{
			name: "AWSDefaults",
			raw:  "s3://cairn",
			env:  map[string]string{"AWS_DEFAULT_REGION": "ap-south-1"},
			want: blobstore.S3Config{Endpoint: "https://s3.ap-south-1.amazonaws.com", Bucket: "cairn", Region: "ap-south-1"},
		},
		{
			name: "RegionAndEndpointFromEnvironment",
			raw:  "s3://cairn",
			env:  map[string]string{"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "ignored", "AWS_ENDPOINT_URL": "http://localstack:4566"},
			want: blobstore.S3Config{Endpoint: "http://localstack:4566", Bucket: "cairn", Region: "us-west-2"},
		},
		{
			name: "S3EndpointVariableFirst",
			raw:  "s3://cairn",
			env:  map[string]string{"AWS_ENDPOINT_URL_S3": "http://s3only:9000", "AWS_ENDPOINT_URL": "http://other:4566"},
			want: blobstore.S3Config{Endpoint: "http://s3only:9000", Bucket: "cairn", Region: "us-east-1"},
		},
		{
			name: "URLBeatsEnvironment",
			raw:  "s3://cairn?endpoint=http://a:1&region=r1",
			env:  map[string]string{"AWS_REGION": "r2", "AWS_ENDPOINT_URL_S3": "http://b:2"},
			want: blobstore.S3Config{Endpoint: "http://a:1", Bucket: "cairn", Region: "r1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := blobstore.ParseURL(tt.raw, func(k string) string { return tt.env[k] })
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
	}{
		{name: "NotS3", raw: "http://bucket"},
		{name: "NoBucket", raw: "s3://?endpoint=http://x:1"},
		{name: "BadBucket", raw: "s3://Bad_Bucket"},
		{name: "Prefix", raw: "s3://bucket/prefix"},
		{name: "Credentials", raw: "s3://key:secret@bucket"},
		{name: "UnknownParameter", raw: "s3://bucket?bucket_prefix=x"},
		{name: "RepeatedParameter", raw: "s3://bucket?region=a&region=b"},
		{name: "BadPathStyle", raw: "s3://bucket?path_style=maybe"},
		{name: "BadPartSize", raw: "s3://bucket?part_size=16MiB"},
		{name: "Opaque", raw: "s3:bucket"},
		{name: "Malformed", raw: "s3://bucket?%zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := blobstore.ParseURL(tt.raw, nil)
			require.Error(t, err)
		})
	}
}

func TestNewS3Errors(t *testing.T) {
	t.Parallel()
	valid := blobstore.S3Config{Endpoint: "http://127.0.0.1:9000", Bucket: "b"}
	_, err := blobstore.NewS3(valid)
	require.NoError(t, err)

	tests := []struct {
		name   string
		modify func(*blobstore.S3Config)
	}{
		{name: "NoEndpoint", modify: func(c *blobstore.S3Config) { c.Endpoint = "" }},
		{name: "NoScheme", modify: func(c *blobstore.S3Config) { c.Endpoint = "127.0.0.1:9000" }},
		{name: "OtherScheme", modify: func(c *blobstore.S3Config) { c.Endpoint = "ftp://127.0.0.1:9000" }},
		{name: "EndpointPath", modify: func(c *blobstore.S3Config) { c.Endpoint = "http://127.0.0.1:9000/bucket" }},
		{name: "NoBucket", modify: func(c *blobstore.S3Config) { c.Bucket = "" }},
		{name: "SmallParts", modify: func(c *blobstore.S3Config) { c.PartSize = 1 << 20 }},
		{name: "HugeParts", modify: func(c *blobstore.S3Config) { c.PartSize = 6 << 30 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tt.modify(&cfg)
			_, err := blobstore.NewS3(cfg)
			require.Error(t, err)
		})
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "blobs")

	s, err := blobstore.Open(t.Context(), "file://"+root, nil)
	require.NoError(t, err)
	require.IsType(t, &blobstore.FileStore{}, s)
	require.Equal(t, root, s.(*blobstore.FileStore).Root())
	require.NoError(t, s.Ping(t.Context()))
	require.DirExists(t, root)

	s, err = blobstore.Open(t.Context(), "file://localhost"+root, nil)
	require.NoError(t, err)
	require.IsType(t, &blobstore.FileStore{}, s)

	s, err = blobstore.Open(t.Context(), "s3://cairn?endpoint=http://127.0.0.1:1", nil)
	require.NoError(t, err, "no I/O at open")
	require.IsType(t, &blobstore.S3Store{}, s)

	for _, raw := range []string{
		"",
		"/abs/path",
		"ftp://host/x",
		"file://relative/path",
		"file:relative",
		"file:///abs?x=1",
		"s3://Bad_Bucket",
		"%zz",
	} {
		_, err := blobstore.Open(t.Context(), raw, nil)
		require.Error(t, err, "%q", raw)
	}
}
