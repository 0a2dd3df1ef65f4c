package alert

import (
	"encoding/json"
	"fmt"
	"strings"
)

// body renders the alert as the sink expects it.
func (n *Notifier) body(a Alert) ([]byte, error) {
	switch n.cfg.Sink {
	case Slack, GChat:
		// Both render *bold* and `code` in a plain text message.
		return json.Marshal(map[string]string{"text": text(a)})
	case Teams:
		return json.Marshal(adaptiveCard(a))
	default:
		return json.Marshal(a)
	}
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
