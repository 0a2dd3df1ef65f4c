package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

const apiServerName = "kube-apiserver"

// KillAPIServer kills kube-apiserver at once (SIGKILL), as a crash or a lost node
// would. etcd keeps the data, and every other component keeps running and retrying.
func (c *Cluster) KillAPIServer() error {
	p, _, err := c.apiServer()
	if err != nil {
		return err
	}
	return p.kill()
}

// StartAPIServer starts the killed kube-apiserver again with the same flags and waits
// until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	old, i, err := c.apiServer()
	if err != nil {
		return err
	}
	if !old.exited() {
		return fmt.Errorf("%s (pid %d) still runs", apiServerName, old.Pid)
	}
	p, err := startProcess(c.Dir, apiServerName, old.Binary, old.Args, nil, c.detached)
	if err != nil {
		return err
	}
	c.processes[i] = p
	if err := c.writeState(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := c.waitAPIServer(ctx); err != nil {
		return c.startError(apiServerName, err)
	}
	return nil
}

func (c *Cluster) apiServer() (*process, int, error) {
	for i, p := range c.processes {
		if p.Name == apiServerName {
			return p, i, nil
		}
	}
	return nil, 0, fmt.Errorf("no %s in this cluster", apiServerName)
}

// CompactEtcd compacts etcd's history up to its current revision, as the API server's
// compactor does every five minutes, and returns that revision. A watch resumed from
// an older resourceVersion then ends with 410 Gone, and its client must list again.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	p, _, err := c.apiServer()
	if err != nil {
		return 0, err
	}
	var etcd string
	for _, arg := range p.Args {
		if v, ok := strings.CutPrefix(arg, "--etcd-servers="); ok {
			etcd = v
		}
	}
	// etcd's JSON gateway: any range answers with the current revision in its header.
	var current struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := postJSON(ctx, etcd+"/v3/kv/range", `{"key":"AA=="}`, &current); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(current.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", current.Header.Revision, err)
	}
	body := fmt.Sprintf(`{"revision":"%d","physical":true}`, rev)
	return rev, postJSON(ctx, etcd+"/v3/kv/compaction", body, nil)
}

func postJSON(ctx context.Context, url, body string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	if into == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
