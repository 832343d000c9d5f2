package cluster

import "testing"

// TestFreePodSubnetIsNotHandedOutTwice: two instances whose seeds start at
// the same /24 get different subnets before either has a bridge (a host
// interface in it), and a released subnet is free again.
func TestFreePodSubnetIsNotHandedOutTwice(t *testing.T) {
	a, err := freePodSubnet("same seed")
	if err != nil {
		t.Fatal(err)
	}
	b, err := freePodSubnet("same seed")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("both instances got %s", a)
	}
	releasePodSubnet(a)
	releasePodSubnet(b)
	c, err := freePodSubnet("same seed")
	if err != nil {
		t.Fatal(err)
	}
	defer releasePodSubnet(c)
	if c != a {
		t.Errorf("after release the seed's first free subnet is %s, want %s again", c, a)
	}
}
