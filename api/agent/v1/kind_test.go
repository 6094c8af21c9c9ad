package agentv1

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

func TestOrderKind(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		order *Order
		want  string
	}{
		{"nil order", nil, OrderKindUnknown},
		{"no action", &Order{Id: "o1"}, OrderKindUnknown},
		{"hold", &Order{Action: &Order_Hold{Hold: &Hold{}}}, OrderKindHold},
		{"release", &Order{Action: &Order_Release{Release: &Release{}}}, OrderKindRelease},
		{"get bmc", &Order{Action: &Order_GetBmc{GetBmc: &GetBMC{}}}, OrderKindGetBMC},
		{"set bmc", &Order{Action: &Order_SetBmc{SetBmc: &SetBMC{}}}, OrderKindSetBMC},
		{"wipe", &Order{Action: &Order_Wipe{Wipe: &Wipe{}}}, OrderKindWipe},
		{"reboot", &Order{Action: &Order_Reboot{Reboot: &Reboot{}}}, OrderKindReboot},
		{"power off", &Order{Action: &Order_PowerOff{PowerOff: &PowerOff{}}}, OrderKindPowerOff},
		{"kexec", &Order{Action: &Order_Kexec{Kexec: &Kexec{}}}, OrderKindKexec},
		// The wrapper alone decides the kind: an empty action is still that action.
		{"hold without body", &Order{Action: &Order_Hold{}}, OrderKindHold},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if got := OrderKind(tt.order); got != tt.want {
				t.Errorf("OrderKind() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestOrderKindCoversAction fails when the proto gains an action OrderKind does not name,
// or when two actions share a kind.
func TestOrderKindCoversAction(t *testing.T) {
	t.Parallel()

	oneof := (&Order{}).ProtoReflect().Descriptor().Oneofs().ByName("action")
	if oneof == nil {
		t.Fatal("Order has no oneof action")
	}

	seen := map[string]protoreflect.Name{}

	for i := range oneof.Fields().Len() {
		field := oneof.Fields().Get(i)

		o := &Order{}
		m := o.ProtoReflect()
		m.Set(field, protoreflect.ValueOfMessage(m.NewField(field).Message()))

		kind := OrderKind(o)
		if kind == OrderKindUnknown {
			t.Errorf("action %s: kind %q", field.Name(), kind)

			continue
		}

		if other, ok := seen[kind]; ok {
			t.Errorf("actions %s and %s share kind %q", other, field.Name(), kind)
		}

		seen[kind] = field.Name()
	}

	if want := 8; len(seen) != want {
		t.Errorf("%d kinds named, want %d", len(seen), want)
	}
}
