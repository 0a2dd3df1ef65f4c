package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envName is the environment variable that sets a flag: CONFIGHASH_ and the flag name
// in upper snake case (--tls-cert-file: CONFIGHASH_TLS_CERT_FILE).
func envName(flagName string) string {
	return "CONFIGHASH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, then sets every flag not given on the command line from its
// environment variable, if that is set. The command line wins.
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer, summary string) error {
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\nUsage: confighash %s [flags]\n\nFlags (each also set by the environment variable shown):\n", summary, fs.Name())
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(out, "  --%s  [$%s]%s\n      %s\n", f.Name, envName(f.Name), def, f.Usage)
		})
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := os.LookupEnv(envName(f.Name))
		if given[f.Name] || !ok || err != nil {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("$%s: %w", envName(f.Name), e)
		}
	})
	return err
}
