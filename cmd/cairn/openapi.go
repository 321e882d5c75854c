package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/api"
)

func newOpenAPICmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "openapi",
		Short: "Print the API's OpenAPI 3.1 document (YAML)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := api.SpecYAML()
			if err != nil {
				return err
			}
			_, err = stdout.Write(b)
			return err
		},
	}
}
