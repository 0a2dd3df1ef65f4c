package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiServer answers /version and lists of nodes, a page at a time as the limit asks,
// and counts the lists.
type apiServer struct {
	major, minor string
	nodes        []corev1.Node
	lists        int
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/version":
		_ = json.NewEncoder(w).Encode(k8sversion.Info{Major: s.major, Minor: s.minor, GitVersion: "v" + s.major + "." + s.minor})
	case "/api/v1/nodes":
		s.lists++
		from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		to := min(len(s.nodes), from+limit)
		list := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, Items: s.nodes[from:to]}
		if to < len(s.nodes) {
			list.Continue = strconv.Itoa(to)
		}
		_ = json.NewEncoder(w).Encode(list)
	default:
		http.NotFound(w, r)
	}
}

func clientOf(t *testing.T, s *apiServer) kubernetes.Interface {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestRestartInPlaceNeedsKubernetes136: restart in place is on from 1.36, as
// discovery spells versions, and off below it or when the version is unreadable.
func TestRestartInPlaceNeedsKubernetes136(t *testing.T) {
	for _, tt := range []struct {
		major, minor string
		want         bool
	}{{"1", "36", true}, {"1", "37+", true}, {"2", "0", true}, {"1", "35", false}, {"1", "29+", false}, {"", "", false}} {
		if got := inPlaceServed(t.Context(), clientOf(t, &apiServer{major: tt.major, minor: tt.minor}), zerolog.Nop()); got != tt.want {
			t.Errorf("%s.%s: %v, want %v", tt.major, tt.minor, got, tt.want)
		}
	}
}

// TestRestartInPlaceNeedsEveryNodeToDeclareIt: on 1.36, restart in place is on only
// when every node that takes pods declares RestartAllContainersOnContainerExits: a
// kubelet older than 1.36 (a control plane upgraded first) turns it off, since the
// scheduler would place no restartable pod there. The nodes are listed in pages, and
// the list ends at the first that does not declare it.
func TestRestartInPlaceNeedsEveryNodeToDeclareIt(t *testing.T) {
	node := func(name string, unschedulable bool, features ...string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable},
			Status: corev1.NodeStatus{DeclaredFeatures: features}}
	}
	many := func(n int, last corev1.Node) []corev1.Node {
		nodes := make([]corev1.Node, n, n+1)
		for i := range nodes {
			nodes[i] = node("n"+strconv.Itoa(i), false, restartAllContainers)
		}
		return append(nodes, last)
	}
	for _, tt := range []struct {
		name  string
		nodes []corev1.Node
		want  bool
		lists int
	}{
		{"no node yet", nil, true, 1},
		{"every node declares it", []corev1.Node{node("a", false, "GuaranteedQoSPodCPUResize", restartAllContainers), node("b", false, restartAllContainers)}, true, 1},
		{"a node of an older kubelet", []corev1.Node{node("a", false, restartAllContainers), node("b", false)}, false, 1},
		{"an older node cordoned", []corev1.Node{node("a", false, restartAllContainers), node("b", true)}, true, 1},
		{"an older node on the third page", many(2*int(nodesLimits.Page), node("old", false)), false, 3},
		{"every node of three pages declares it", many(2*int(nodesLimits.Page), node("new", false, restartAllContainers)), true, 3},
	} {
		s := &apiServer{major: "1", minor: "36", nodes: tt.nodes}
		if got := inPlaceServed(t.Context(), clientOf(t, s), zerolog.Nop()); got != tt.want || s.lists != tt.lists {
			t.Errorf("%s: %v after %d lists, want %v after %d", tt.name, got, s.lists, tt.want, tt.lists)
		}
	}
}
