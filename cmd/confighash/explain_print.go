package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/confighash/confighash"
)

func printExplanations(out io.Writer, format string, explanations []confighash.Explanation) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(explanations)
	}
	for i, e := range explanations {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "%s %s/%s: %s\n  %s\n", e.Kind, e.Namespace, e.Name, strings.ToUpper(e.Verdict), e.Why)
		fmt.Fprintf(out, "  opted in: %v (%s)\n", e.OptedIn, e.OptIn)
		for _, p := range e.Problems {
			fmt.Fprintf(out, "  problem: %s\n", p)
		}
		for i, u := range e.Unseen {
			fmt.Fprintf(out, "  %-26s%s\n", cond(i == 0, "could not see:"), u)
		}
		if e.Watcher != "" {
			fmt.Fprintf(out, "  the watcher:              %s\n", e.Watcher)
		}
		for i, w := range e.Warnings {
			fmt.Fprintf(out, "  %-26s%s\n", cond(i == 0, "the watcher warned:"), w)
		}
		if e.Hash != "" || e.TemplateHash != "" {
			fmt.Fprintf(out, "  hash on the pod template: %s\n  hash now:                 %s\n", orNone(e.TemplateHash), orNone(e.Hash))
		}
		if e.Adopted != "" {
			fmt.Fprintf(out, "  adopted at:               %s\n", e.Adopted)
		}
		if e.Pacing != "" {
			fmt.Fprintf(out, "  changes roll:             %s\n", e.Pacing)
		}
		if e.Held != "" {
			fmt.Fprintf(out, "  held by a halted wave:    %s\n", e.Held)
		}
		if e.Failed != "" {
			fmt.Fprintf(out, "  failed in a wave:         %s\n", e.Failed)
		}
		if len(e.Sources) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SOURCE\tCOUNTS\tKEYS\tRECORDED\tNOW\tUSED BY")
		for _, s := range e.Sources {
			counts := "yes"
			if !s.Counts {
				counts = "no: " + s.Why
			} else if s.Why != "" {
				counts = "yes (" + s.Why + ")"
			}
			keys := "all"
			if len(s.Keys) > 0 {
				keys = strings.Join(s.Keys, ",")
			}
			fmt.Fprintf(tw, "  %s/%s\t%s\t%s\t%s\t%s\t%s\n", s.Kind, s.Name, counts, keys, orNone(s.Recorded), orNone(s.Now), strings.Join(s.Uses, "; "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, s := range e.Sources {
			if s.Snapshot != "" || s.RollsTo != "" {
				fmt.Fprintf(out, "  %s/%s pinned: runs %s", s.Kind, s.Name, orNone(s.Snapshot))
				if s.RollsTo != "" {
					fmt.Fprintf(out, ", rolls to %s", s.RollsTo)
				}
				fmt.Fprintln(out)
			}
		}
	}
	return nil
}

// cond is s when first, else blank: a list's label on its first line alone.
func cond(first bool, s string) string {
	if first {
		return s
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
