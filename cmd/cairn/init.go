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
	"golang.org/x/mod/modfile"

	"github.com/cairnrun/cairn"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/sdk"
)

// templates are the projects `cairn init` writes, one folder per language. A
// file's path and text name the workflow __NAME__; a trailing .tmpl is dropped
// (.go files cannot be embedded under their own names: they would belong to
// this module), and gitignore.tmpl becomes .gitignore. Files in a bin folder
// are executable. The SDK a handler is written on is copied in after (a Go
// project's go.mod is written with it: writeGoSDK).
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
	// sdk writes the function SDK the handler is written on into the project
	// folder (nil: none, the handler speaks the protocol itself): Python's and
	// TypeScript's inside the bundle folder, since a bundle carries what its
	// handlers import; Go's beside the handler's source, which compiles it in.
	sdk func(dir string) error
}

// initLangs are the languages of `cairn init --lang`.
var initLangs = map[string]initLang{
	"sh": {".", "  cairn test            # runs tests/*.yaml (the handler needs jq)\n  cairn dev --watch .   # a server that deploys every save", nil},
	"python": {".", "  cairn test            # runs tests/*.yaml (python3, standard library only)\n  cairn dev --watch .   # a server that deploys every save",
		copySDK(sdk.Python(), "bin")},
	"go": {".", "  make build            # go build -o bin/greet ./cmd/greet\n  cairn test            # runs tests/*.yaml\n" +
		"  cairn dev --watch .   # a server that deploys every save (make build after each edit)", writeGoSDK},
	"ts": {"bundle", "  npm install && npm run build   # tsc: src/ into bundle/dist/ (node_modules stays out of the bundle)\n" +
		"  (cd bundle && cairn test)      # runs tests/*.yaml\n" +
		"  cairn dev --watch bundle       # a server that deploys every save (npm run build -- --watch beside it)",
		copySDK(sdk.TypeScript(), "bundle/node_modules/@cairnrun/fn")},
}

func newInitCmd(stdout io.Writer) *cobra.Command {
	var lang string
	cmd := &cobra.Command{
		Use:   "init NAME",
		Short: "Start a bundle: a workflow, a handler and a test case, in the folder NAME",
		Long: `init writes a new bundle into the folder NAME (which must not exist, or be
empty): cairn.yaml with one exec step, the step's handler in the language of
--lang (sh, python, go or ts) on Cairn's function SDK for it, with a copy of the
SDK (sh speaks the protocol itself), and tests/*.yaml, cases of cairn test that
pass. NAME is the workflow's name too: 1 to 63 of a-z, 0-9 and '-'.`,
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
		if err := spec.sdk(dir); err != nil {
			return fmt.Errorf("init: copy the SDK: %w", err)
		}
	}
	fmt.Fprintf(stdout, "wrote %s: workflow %s, a %s handler and its test cases (tests/*.yaml) in the bundle folder %s\nnext:\n  cd %s\n%s\n",
		dir, name, lang, filepath.Join(dir, spec.bundle), shellQuote(dir), spec.next)
	return nil
}

// copySDK returns an initLang.sdk that copies files into the folder sub of the
// project.
func copySDK(files fs.FS, sub string) func(dir string) error {
	return func(dir string) error {
		return os.CopyFS(filepath.Join(dir, filepath.FromSlash(sub)), files)
	}
}

// goSDKDir is where a Go project keeps its copy of the Go SDK: a module
// github.com/cairnrun/cairn holding the package fn alone, which the project's
// go.mod replaces the module with. The project then builds with no other copy
// of this module (which need not be on the Go module proxy at the version of
// this binary), fetching only the SDK's dependency, aws-lambda-go.
const goSDKDir = "third_party/cairn"

// writeGoSDK writes the project's go.mod and go.sum, and the copy of the Go SDK
// in goSDKDir, with this module's Go version and its version of aws-lambda-go.
func writeGoSDK(dir string) error {
	modData, err := cairn.GoSDK.ReadFile("go.mod")
	if err != nil {
		return err
	}
	mod, err := modfile.ParseLax("go.mod", modData, nil)
	if err != nil {
		return err
	}
	const lambda = "github.com/aws/aws-lambda-go"
	var lambdaVersion string
	for _, r := range mod.Require {
		if r.Mod.Path == lambda {
			lambdaVersion = r.Mod.Version
		}
	}
	if mod.Go == nil || lambdaVersion == "" {
		return errors.New("the Go SDK's go.mod names no Go version or no " + lambda)
	}
	sumData, err := cairn.GoSDK.ReadFile("go.sum")
	if err != nil {
		return err
	}
	var sum strings.Builder
	for line := range strings.Lines(string(sumData)) {
		if strings.HasPrefix(line, lambda+" "+lambdaVersion+" ") || strings.HasPrefix(line, lambda+" "+lambdaVersion+"/go.mod ") {
			sum.WriteString(line)
		}
	}
	sdkDir := filepath.Join(dir, filepath.FromSlash(goSDKDir))
	files := map[string]string{
		filepath.Join(dir, "go.mod"): fmt.Sprintf(`module %s

go %s

require github.com/cairnrun/cairn v0.0.0

require %s %s // indirect

// The Go function SDK (package fn) is the copy cairn init wrote in %s.
replace github.com/cairnrun/cairn => ./%s
`, filepath.Base(filepath.Clean(dir)), mod.Go.Version, lambda, lambdaVersion, goSDKDir, goSDKDir),
		filepath.Join(dir, "go.sum"):    sum.String(),
		filepath.Join(sdkDir, "go.mod"): fmt.Sprintf("module github.com/cairnrun/cairn\n\ngo %s\n\nrequire %s %s\n", mod.Go.Version, lambda, lambdaVersion),
	}
	src, err := fs.Glob(cairn.GoSDK, "fn/*.go")
	if err != nil {
		return err
	}
	for _, p := range src {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := cairn.GoSDK.ReadFile(p)
		if err != nil {
			return err
		}
		files[filepath.Join(sdkDir, filepath.FromSlash(p))] = string(b)
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
