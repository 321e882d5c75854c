package main

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/sdk"
)

// templates are the projects `cairn init` writes, one folder per language. A
// file's path and text name the workflow __NAME__; a trailing .tmpl is dropped
// (go.mod and .go files cannot be embedded under their own names: they would
// belong to this module), and gitignore.tmpl becomes .gitignore. Files in a bin
// folder are executable.
//
//go:embed all:templates
var templates embed.FS

// templateName stands for the workflow's name in the templates.
const templateName = "__NAME__"

// initLang is a language of `cairn init --lang`.
type initLang struct {
	// bundle is the bundle folder in the project: "." or, for a project whose
	// tools would weigh on every deploy (node_modules), a folder of its own.
	bundle string
	// next are the steps after init, as printed.
	next string
	// sdk is the function SDK the handler is written on, copied into the
	// project (nil: none, the handler speaks the protocol itself).
	sdk *initSDK
}

// initSDK is an SDK's files and the project folder they are copied to: inside
// the bundle folder, since a bundle carries what its handlers import.
type initSDK struct {
	files func() fs.FS
	dir   string
}

// initLangs are the languages of `cairn init --lang`.
var initLangs = map[string]initLang{
	"sh": {".", "  cairn test            # runs tests/greet.yaml (the handler needs jq)\n  cairn dev --watch .   # a server that deploys every save", nil},
	"python": {".", "  cairn test            # runs tests/greet.yaml (python3, standard library only)\n  cairn dev --watch .   # a server that deploys every save",
		&initSDK{sdk.Python, "bin"}},
	"go": {".", "  make build            # go build -o bin/greet ./cmd/greet\n  cairn test            # runs tests/greet.yaml\n" +
		"  cairn dev --watch .   # a server that deploys every save (make build after each edit)", nil},
	"ts": {"bundle", "  npm install && npm run build   # tsc: src/ into bundle/dist/ (node_modules stays out of the bundle)\n" +
		"  (cd bundle && cairn test)      # runs tests/greet.yaml\n" +
		"  cairn dev --watch bundle       # a server that deploys every save (npm run build -- --watch beside it)",
		&initSDK{sdk.TypeScript, "bundle/node_modules/@cairnrun/fn"}},
}

func newInitCmd(stdout io.Writer) *cobra.Command {
	var lang string
	cmd := &cobra.Command{
		Use:   "init NAME",
		Short: "Start a bundle: a workflow, a handler and a test case, in the folder NAME",
		Long: `init writes a new bundle into the folder NAME (which must not exist, or be
empty): cairn.yaml with one exec step, the step's handler in the language of
--lang (sh, python, go or ts), and tests/greet.yaml, a case of cairn test that
passes. NAME is the workflow's name too: 1 to 63 of a-z, 0-9 and '-'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return initProject(stdout, args[0], lang)
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "sh", "the handler's language: sh, python, go or ts")
	return cmd
}

// initProject writes the template of lang into the folder dir, whose base name is
// the workflow's name.
func initProject(stdout io.Writer, dir, lang string) error {
	spec, ok := initLangs[lang]
	if !ok {
		return fmt.Errorf("init: --lang %q: want one of %s", lang, strings.Join(slices.Sorted(maps.Keys(initLangs)), ", "))
	}
	name := filepath.Base(filepath.Clean(dir))
	if !bundle.ValidName(name) {
		return fmt.Errorf("init: %q cannot name a workflow: 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit", name)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("init: %s exists and is not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("init: %w", err)
	}
	root := path.Join("templates", lang)
	err := fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, root+"/")
		data, err := templates.ReadFile(p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if path.Base(path.Dir(rel)) == "bin" {
			mode = 0o755
		}
		rel = strings.TrimSuffix(rel, ".tmpl")
		if base := path.Base(rel); base == "gitignore" {
			rel = path.Join(path.Dir(rel), ".gitignore")
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, []byte(strings.ReplaceAll(string(data), templateName, name)), mode)
	})
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if spec.sdk != nil {
		if err := os.CopyFS(filepath.Join(dir, filepath.FromSlash(spec.sdk.dir)), spec.sdk.files()); err != nil {
			return fmt.Errorf("init: copy the SDK: %w", err)
		}
	}
	fmt.Fprintf(stdout, "wrote %s: workflow %s, a %s handler and tests/greet.yaml in the bundle folder %s\nnext:\n  cd %s\n%s\n",
		dir, name, lang, filepath.Join(dir, spec.bundle), shellQuote(dir), spec.next)
	return nil
}
