package confighash

import (
	"fmt"
	"slices"
	"strings"
)

// Explanation says, for people and scripts, how confighash sees a workload: whether it
// is opted in and by what, every source it uses and whether it counts, the record
// against the sources now, and whether a rollout is due.
type Explanation struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// OptedIn says whether confighash acts on the workload; OptIn says by what, or why not.
	OptedIn  bool                `json:"optedIn"`
	OptIn    string              `json:"optIn"`
	Problems []string            `json:"problems,omitempty"`
	Sources  []SourceExplanation `json:"sources"`
	// TemplateHash is the hash on the pod template; Hash the one the webhook would
	// write now (empty without the key).
	TemplateHash string `json:"templateHash"`
	Hash         string `json:"hash,omitempty"`
	Adopted      string `json:"adopted,omitempty"`
	// Verdict is one of VerdictUpToDate, VerdictRollout, VerdictNoRollout, VerdictUnknown.
	Verdict string `json:"verdict"`
	// Why says what the verdict rests on.
	Why string `json:"why"`
}

// SourceExplanation is one source a workload uses or names.
type SourceExplanation struct {
	Kind string   `json:"kind"`
	Name string   `json:"name"`
	Uses []string `json:"uses"`
	// Counts says whether it enters the hash; Why, when it does not, or why it does.
	Counts bool   `json:"counts"`
	Why    string `json:"why,omitempty"`
	// Keys are the keys that count; empty means all of them.
	Keys []string `json:"keys,omitempty"`
	// Recorded is its entry in the sources record; Now, its digest now ("absent" when
	// it does not exist); both empty without the key.
	Recorded string `json:"recorded,omitempty"`
	Now      string `json:"now,omitempty"`
}

// The verdicts.
const (
	VerdictUpToDate  = "up to date"
	VerdictRollout   = "rollout pending"
	VerdictNoRollout = "nothing will roll"
	VerdictUnknown   = "unknown"
	// VerdictCreated is for a manifest not yet applied: the webhook hashes it at its
	// creation.
	VerdictCreated = "hashed at creation"
)

// ExplainInput is what Explain needs of a workload and its namespace.
type ExplainInput struct {
	Vocabulary Vocabulary
	Workload   *Workload
	// New is set for a manifest not yet applied.
	New bool
	// Every is set in a namespace that opts every workload in.
	Every bool
	// Sources are the namespace's sources that exist, by reference; Names, all of
	// them, for name patterns.
	Sources map[SourceRef]Source
	Names   []SourceRef
	// Key, when HaveKey, lets digests and hashes be compared.
	Key     Key
	HaveKey bool
}

// Explain explains a workload. It computes what the webhook and the watcher would.
func Explain(in ExplainInput) Explanation {
	w := in.Workload
	e := Explanation{Kind: w.Kind.Kind, Namespace: w.Namespace, Name: w.Name, TemplateHash: w.Template.Annotations[AnnotationHash],
		Adopted: w.Annotations[AnnotationAdopted]}
	policy, problems := in.Vocabulary.ParsePolicy(w.Annotations, w.Template.Annotations)
	for _, p := range problems {
		e.Problems = append(e.Problems, p.Error())
	}
	if in.Every {
		policy = policy.ForEveryWorkload()
	}
	e.OptedIn, e.OptIn = policy.Enabled(), optInOf(in, w, policy)
	prev, recordErr := Record(nil), error(nil)
	if text, ok := w.Annotations[AnnotationSources]; ok {
		prev, recordErr = ParseRecord(text)
		if recordErr != nil {
			e.Problems = append(e.Problems, recordErr.Error())
		}
	}
	refs := References(w.Template)
	candidates := policy.Candidates(refs, append(slices.Clone(in.Names), prev.Sources()...))
	e.Sources = explainSources(in, policy, refs, candidates, prev)
	if !e.OptedIn {
		e.Verdict, e.Why = VerdictNoRollout, "not opted in: "+e.OptIn
		return e
	}
	if !in.HaveKey {
		e.Verdict, e.Why = VerdictUnknown, "without the hash key, digests and hashes cannot be compared; the sources and the keys that count are listed"
		return e
	}
	want := Update(prev, Observe(in.Key, policy, candidates, in.Sources))
	e.Hash = want.Hash(in.Key)
	switch {
	case recordErr == nil && slices.Equal(want, prev) && Settled(e.TemplateHash, e.Adopted, e.Hash):
		e.Verdict, e.Why = VerdictUpToDate, "the recorded digests are the current ones, and the pod template carries their hash"
		if e.TemplateHash == "" {
			e.Why = "adopted without a rollout: its pods have the current data"
		}
		if ignored := notCounted(e.Sources); ignored != "" {
			e.Why += "; changes to " + ignored + " roll nothing"
		}
	case prev == nil && e.TemplateHash == "" && in.New:
		e.Verdict, e.Why = VerdictCreated, "the webhook writes this hash when the workload is created, so it starts with the current data"
	case prev == nil && e.TemplateHash == "":
		e.Verdict, e.Why = VerdictRollout, "never hashed: the watcher adopts it if no source was written after its current revision, and rolls it once otherwise"
	case Settled(e.TemplateHash, e.Adopted, e.Hash):
		e.Verdict, e.Why = VerdictUpToDate, "the hash is current; only the record will be rewritten ("+changedEntries(prev, want)+")"
	default:
		e.Verdict, e.Why = VerdictRollout, changedEntries(prev, want)+": the next touch writes the new hash"
	}
	return e
}

// optInOf says which annotation opts the workload in, or why it is not.
func optInOf(in ExplainInput, w *Workload, p Policy) string {
	var by []string
	for _, name := range append(in.Vocabulary.OptInAnnotations(), AnnotationInject, ReloaderAuto) {
		if v, ok := w.Annotations[name]; ok && !slices.Contains(by, name+"="+v) {
			by = append(by, name+"="+v)
		} else if v, ok := w.Template.Annotations[name]; ok && !slices.Contains(by, name+"="+v+" (pod template)") {
			by = append(by, name+"="+v+" (pod template)")
		}
	}
	switch {
	case p.OptOut:
		return "opted out by " + strings.Join(by, ", ")
	case len(by) > 0 && p.Enabled():
		return strings.Join(by, ", ")
	case in.Every && p.Enabled():
		return "its namespace opts every workload in"
	case len(by) > 0:
		return strings.Join(by, ", ") + " opts in to no source kind"
	}
	return "no opt-in annotation"
}

func explainSources(in ExplainInput, p Policy, refs, candidates []Reference, prev Record) []SourceExplanation {
	uses := Uses(in.Workload.Template)
	byRef := map[SourceRef]*SourceExplanation{}
	var order []SourceRef
	add := func(ref SourceRef) *SourceExplanation {
		if s, ok := byRef[ref]; ok {
			return s
		}
		s := &SourceExplanation{Kind: string(ref.Kind), Name: ref.Name, Uses: uses[ref]}
		byRef[ref] = s
		order = append(order, ref)
		return s
	}
	for _, r := range refs {
		s := add(r.SourceRef)
		switch {
		case p.Exclude[r.SourceRef]:
			s.Why = "excluded by the workload's annotations"
		case !p.Discover[r.Kind]:
			s.Why = fmt.Sprintf("the workload's opt-in does not count %ss", strings.ToLower(string(r.Kind)))
		}
	}
	recorded := map[SourceRef]RecordEntry{}
	for _, e := range prev {
		recorded[e.SourceRef] = e
	}
	for _, c := range candidates {
		s := add(c.SourceRef)
		if c.Named {
			s.Uses = append(s.Uses, "named by the workload's annotations")
		}
		src, exists := in.Sources[c.SourceRef]
		switch {
		case !exists || !src.Present:
			s.Why = "does not exist"
		case !p.counts(c, src):
			s.Why = "ignored by its own annotation, or unmatched in search mode"
		default:
			s.Counts, s.Why = true, ""
			if !c.AllKeys {
				s.Keys = c.Keys
			}
		}
		if in.HaveKey {
			if e, ok := recorded[c.SourceRef]; ok {
				s.Recorded = strings.TrimPrefix(Record{e}.String(), recordVersion+" "+recordKinds[e.Kind]+"/"+e.Name+"=")
			}
			s.Now = "absent"
			if exists && src.Present {
				s.Now = SourceDigest(in.Key, c, src).String()
			}
		}
	}
	out := make([]SourceExplanation, len(order))
	for i, ref := range order {
		out[i] = *byRef[ref]
	}
	slices.SortFunc(out, func(a, b SourceExplanation) int {
		return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
	})
	return out
}

// notCounted names the sources that are used but do not count.
func notCounted(sources []SourceExplanation) string {
	var names []string
	for _, s := range sources {
		if !s.Counts && s.Why != "does not exist" {
			names = append(names, s.Kind+"/"+s.Name)
		}
	}
	return strings.Join(names, ", ")
}

// changedEntries names the sources whose entries differ between two records.
func changedEntries(before, after Record) string {
	old := map[SourceRef]RecordEntry{}
	for _, e := range before {
		old[e.SourceRef] = e
	}
	var names []string
	for _, e := range after {
		if o, ok := old[e.SourceRef]; !ok || o != e {
			names = append(names, e.SourceRef.String()+" changed")
		}
		delete(old, e.SourceRef)
	}
	for ref := range old {
		names = append(names, ref.String()+" no longer counts")
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "nothing changed"
	}
	return strings.Join(names, ", ")
}
