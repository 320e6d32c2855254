package governor

import "testing"

func TestStoreKeyText(t *testing.T) {
	for key, want := range map[string]string{
		"policy\x00{sender-rate\x00sender=counted@example.org}\x000":            "rule sender-rate: sender=counted@example.org (limit 1)",
		"policy\x00{per-net\x00client_address=192.0.2.0/24\x00sender=a@b}\x001": "rule per-net: client_address=192.0.2.0/24, sender=a@b (limit 2)",
		"anvil\x00c\x00127.0.0.1:25:127.0.0.1":                                  "anvil connections of 127.0.0.1:25:127.0.0.1",
		"anvil\x00r\x00smtp:192.0.2.1":                                          "anvil rates of smtp:192.0.2.1",
		"class\x00local":                                                        "class local",
		"throttle\x00c\x00relay-a\x00relay.example":                             "throttle relay-a, bucket relay.example: sessions",
		"throttle\x00r\x00relay-a\x00relay.example":                             "throttle relay-a, bucket relay.example: bookings",
		"health\x00alive":                                                       "health, alive",
		"policy\x00broken":                                                      "policy, broken",
		"":                                                                      "",
	} {
		if got := StoreKeyText(key); got != want {
			t.Errorf("StoreKeyText(%q) = %q, want %q", key, got, want)
		}
	}
}

// The keys the governor makes render as StoreKeyText says.
func TestStoreKeyTextOfMadeKeys(t *testing.T) {
	if got := StoreKeyText(anvilCountKey("smtp:192.0.2.1")); got != "anvil connections of smtp:192.0.2.1" {
		t.Errorf("anvil count key: %q", got)
	}
	if got := StoreKeyText(anvilRateKey("smtp:192.0.2.1")); got != "anvil rates of smtp:192.0.2.1" {
		t.Errorf("anvil rate key: %q", got)
	}
}
