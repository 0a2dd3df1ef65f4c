package alert

import (
	"encoding/json"
	"fmt"
	"strings"
)

// body renders the alert as the sink expects it. What a tenant chooses (a field
// manager's name in a reason, say) is escaped as the sink reads markup: it may neither
// ping a channel nor show a link as a name of its own choosing.
func (n *Notifier) body(a Alert) ([]byte, error) {
	switch n.cfg.Sink {
	case Slack, GChat:
		// Both render *bold* and `code` in a plain text message.
		a.Reason = escapers[n.cfg.Sink].Replace(a.Reason)
		return json.Marshal(map[string]string{"text": text(a)})
	case Teams:
		a.Reason = escapers[Teams].Replace(a.Reason)
		return json.Marshal(adaptiveCard(a))
	default:
		return json.Marshal(a) // data, not markup
	}
}

// escapers make text inert in each chat sink's markup. Slack reads <!channel>,
// <@user> and <url|text> and asks for &, < and > as entities; Google Chat reads
// <users/all> and <url|text> and has no entities, so its angle brackets become
// look-alikes; Teams' Adaptive Cards read Markdown links, [text](url), and take
// backslash escapes.
var escapers = map[Sink]*strings.Replacer{
	Slack: strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;"),
	GChat: strings.NewReplacer("<", "\u2039", ">", "\u203a"),
	Teams: strings.NewReplacer("\\", "\\\\", "[", "\\[", "]", "\\]", "(", "\\(", ")", "\\)", "*", "\\*", "_", "\\_", "<", "\\<", ">", "\\>"),
}

// title says what happened, in one line.
func title(a Alert) string {
	n := len(a.Workloads) + a.More
	where := a.Namespace
	if a.Cluster != "" {
		where = a.Cluster + "/" + a.Namespace
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	switch a.What {
	case Healed:
		return fmt.Sprintf("confighash healed %d workload%s in %s: the webhook did not write the hash", n, plural, where)
	case Failed:
		return fmt.Sprintf("confighash could not update the hash of %d workload%s in %s", n, plural, where)
	case Halted:
		return fmt.Sprintf("confighash halted a rollout in %s: %d workload%s failed to roll out", where, n, plural)
	case Held:
		return fmt.Sprintf("confighash holds %d workload%s in %s at their current revision: a source keeps changing", n, plural, where)
	case Reverted:
		return fmt.Sprintf("confighash reverted %d workload%s in %s to the data they ran before a change that failed to roll out", n, plural, where)
	}
	return fmt.Sprintf("confighash is rolling %d workload%s in %s", n, plural, where)
}

func names(objs []Object, more int) string {
	parts := make([]string, len(objs))
	for i, o := range objs {
		parts[i] = o.String()
	}
	s := strings.Join(parts, ", ")
	if more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// text is the message of the chat sinks.
func text(a Alert) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s*\n", title(a))
	if len(a.Sources) > 0 {
		fmt.Fprintf(&b, "Changed: %s\n", names(a.Sources, 0))
	}
	fmt.Fprintf(&b, "Workloads: %s\n", names(a.Workloads, a.More))
	if a.Reason != "" {
		fmt.Fprintf(&b, "Reason: %s\n", a.Reason)
	}
	if a.AdditionalInfo != "" {
		fmt.Fprintf(&b, "%s\n", a.AdditionalInfo)
	}
	fmt.Fprintf(&b, "More: `%s`", a.Explain)
	return b.String()
}

// adaptiveCard is the message a Teams Workflows webhook accepts: an Adaptive Card in
// a message attachment (the retired Office 365 connectors took MessageCards).
func adaptiveCard(a Alert) map[string]any {
	type fact struct {
		Title string `json:"title"`
		Value string `json:"value"`
	}
	facts := []fact{}
	if a.Cluster != "" {
		facts = append(facts, fact{"Cluster", a.Cluster})
	}
	facts = append(facts, fact{"Namespace", a.Namespace})
	if len(a.Sources) > 0 {
		facts = append(facts, fact{"Changed", names(a.Sources, 0)})
	}
	facts = append(facts, fact{"Workloads", names(a.Workloads, a.More)})
	if a.Reason != "" {
		facts = append(facts, fact{"Reason", a.Reason})
	}
	body := []map[string]any{
		{"type": "TextBlock", "text": title(a), "weight": "Bolder", "size": "Medium", "wrap": true},
		{"type": "FactSet", "facts": facts},
	}
	if a.AdditionalInfo != "" {
		body = append(body, map[string]any{"type": "TextBlock", "text": a.AdditionalInfo, "wrap": true})
	}
	body = append(body, map[string]any{"type": "TextBlock", "text": "More: `" + a.Explain + "`", "wrap": true, "isSubtle": true})
	return map[string]any{
		"type": "message",
		"attachments": []map[string]any{{
			"contentType": "application/vnd.microsoft.card.adaptive",
			"content": map[string]any{
				"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
				"type":    "AdaptiveCard",
				"version": "1.4",
				"body":    body,
			},
		}},
	}
}
