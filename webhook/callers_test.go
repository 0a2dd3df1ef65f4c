package webhook

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseCallersTakesAddressesAndRanges(t *testing.T) {
	got, err := ParseCallers("10.0.0.7, 192.0.2.0/24,2001:db8::1")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::1/128")}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := ParseCallers("10.0.0.0/8,kubernetes"); err == nil {
		t.Error("a name was taken for an address")
	}
}

func TestANodesPodNetworkAddressesAreItsHostsOnly(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			annotationCalicoIPIP: "192.168.12.64",
			annotationOVNSubnets: `{"default":["10.128.0.0/23"]}`,
		}},
		Spec: corev1.NodeSpec{PodCIDRs: []string{"10.42.1.0/24"}},
	}
	got := nodePodNetworkAddrs(n)
	for _, want := range []string{"192.168.12.64", "10.42.1.0", "10.42.1.1", "10.128.0.2"} {
		if !slices.Contains(got, netip.MustParseAddr(want)) {
			t.Errorf("%s missing from %v", want, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("got %v, want exactly the tunnel, bridge, Flannel and OVN addresses", got)
	}
}

func TestCallersAllowOnlyTheirAddresses(t *testing.T) {
	c := &Callers{extra: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28")}, log: zerolog.Nop(), refused: map[netip.Addr]bool{}}
	c.addrs.Store(&map[netip.Addr]bool{netip.MustParseAddr("10.0.0.1"): true})
	for addr, want := range map[string]bool{
		"10.0.0.1:443": true, "[::ffff:10.0.0.1]:443": true, "192.0.2.9:1": true,
		"10.0.0.2:443": false, "192.0.2.16:1": false, "not an address": false,
	} {
		if got := c.Allows(addr); got != want {
			t.Errorf("Allows(%q) = %v, want %v", addr, got, want)
		}
	}
}
