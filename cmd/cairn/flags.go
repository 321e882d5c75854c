package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// envAnnotation is the pflag annotation naming a flag's environment variable.
const envAnnotation = "cairn_env"

// bindEnv names the environment variable of each flag (flag name → variable):
// applyEnv sets the flag from it, and --help shows it after the flag's usage.
func bindEnv(fs *pflag.FlagSet, vars map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		f := fs.Lookup(name)
		if f == nil {
			panic("bindEnv: no flag --" + name) // a programming error
		}
		f.Usage += " (env " + vars[name] + ")"
		_ = fs.SetAnnotation(name, envAnnotation, []string{vars[name]})
	}
}

// applyEnv sets every flag of fs bound to an environment variable (bindEnv) from
// that variable, unless the flag was given on the command line or the variable is
// unset or empty. The flag's own parser reads the value, so a variable that does not
// parse is an error naming it, its value and its flag; every such variable is
// reported, before anything starts.
func applyEnv(fs *pflag.FlagSet, e env) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		// The first variable set wins; the others are aliases (envAlias).
		for _, key := range f.Annotations[envAnnotation] {
			if err := fromEnv(f, e, key); err != nil || f.Changed {
				errs = append(errs, err)
				return
			}
		}
	})
	return errors.Join(errs...)
}

// envAlias adds alias, read when the flag's own variable is unset, to the flag
// name of fs (bound with bindEnv first).
func envAlias(fs *pflag.FlagSet, name, alias string) {
	f := fs.Lookup(name)
	if f == nil || len(f.Annotations[envAnnotation]) == 0 {
		panic("envAlias: no bound flag --" + name) // a programming error
	}
	f.Usage = strings.TrimSuffix(f.Usage, ")") + ", or its alias " + alias + ")"
	_ = fs.SetAnnotation(name, envAnnotation, append(f.Annotations[envAnnotation], alias))
}

// fromEnv sets f from the variable key unless f was given on the command line.
func fromEnv(f *pflag.Flag, e env, key string) error {
	if f.Changed {
		return nil
	}
	v := e(key)
	if v == "" {
		return nil
	}
	if err := f.Value.Set(v); err != nil {
		return fmt.Errorf("%s=%q (--%s): %w", key, v, f.Name, err)
	}
	f.Changed = true
	return nil
}
