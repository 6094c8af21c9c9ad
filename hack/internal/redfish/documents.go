package redfish

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// The documents are written here, after the DMTF schema (ServiceRoot v1.15,
// ComputerSystem v1.20, SessionService v1.1, Session v1.6, the Base message registry
// for errors); they carry what a client needs to find and drive a system, no more.

const (
	registry = "Base.1.16."
	maxBody  = 64 << 10
)

func odataID(path string) map[string]string { return map[string]string{"@odata.id": path} }

func (s *Service) serviceRoot() map[string]any {
	doc := map[string]any{
		"@odata.id":      rootPath + "/",
		"@odata.type":    "#ServiceRoot.v1_15_0.ServiceRoot",
		"Id":             "RootService",
		"Name":           "Anvil lab Redfish service",
		"RedfishVersion": "1.15.0",
		"UUID":           "a6d1c4b0-6e3a-4b51-9d5e-616e76696c00",
		"Systems":        odataID(systemsPath),
		"Links":          map[string]any{},
	}

	if !s.opts.NoSessions {
		doc["SessionService"] = odataID(sessionSvc)
		doc["Links"] = map[string]any{"Sessions": odataID(sessionsPath)}
	}

	return doc
}

func (s *Service) systemCollection() map[string]any {
	members := make([]map[string]string, 0, len(s.systems))
	for _, sys := range s.systems {
		members = append(members, odataID(systemsPath+"/"+sys.ID))
	}

	return map[string]any{
		"@odata.id":           systemsPath,
		"@odata.type":         "#ComputerSystemCollection.ComputerSystemCollection",
		"Name":                "Computer System Collection",
		"Members":             members,
		"Members@odata.count": len(members),
	}
}

// bootState is what the Boot object says about the override.
type bootState struct {
	networkOnce bool
	mode        string
}

func (s *Service) systemDoc(sys *system, on bool, boot bootState) map[string]any {
	path := systemsPath + "/" + sys.ID

	power := "Off"
	if on {
		power = "On"
	}

	enabled, target := "Disabled", "None"
	if boot.networkOnce {
		enabled, target = "Once", "Pxe"
	}

	bootDoc := map[string]any{
		"BootSourceOverrideEnabled":                         enabled,
		"BootSourceOverrideEnabled@Redfish.AllowableValues": []string{"Disabled", "Once"},
		"BootSourceOverrideTarget":                          target,
		"BootSourceOverrideTarget@Redfish.AllowableValues":  []string{"None", "Pxe"},
	}

	if !s.opts.NoBootMode {
		bootDoc["BootSourceOverrideMode"] = boot.mode
		bootDoc["BootSourceOverrideMode@Redfish.AllowableValues"] = []string{"Legacy", "UEFI"}
	}

	reset := map[string]any{"target": path + resetSuffix}
	if !s.opts.NoResetAllowableValues {
		reset["ResetType@Redfish.AllowableValues"] = s.opts.ResetTypes
	}

	return map[string]any{
		"@odata.id":    path,
		"@odata.type":  "#ComputerSystem.v1_20_0.ComputerSystem",
		"Id":           sys.ID,
		"Name":         sys.Machine.Name(),
		"SystemType":   "Physical",
		"UUID":         sys.Machine.UUID(),
		"Manufacturer": sys.Manufacturer,
		"Model":        sys.Model,
		"SerialNumber": sys.SerialNumber,
		"PowerState":   power,
		"Status":       map[string]string{"State": "Enabled", "Health": "OK"},
		"Boot":         bootDoc,
		"Actions":      map[string]any{"#ComputerSystem.Reset": reset},
		"Links":        map[string]any{},
	}
}

func sessionServiceDoc() map[string]any {
	return map[string]any{
		"@odata.id":      sessionSvc,
		"@odata.type":    "#SessionService.v1_1_9.SessionService",
		"Id":             "SessionService",
		"Name":           "Session Service",
		"ServiceEnabled": true,
		"SessionTimeout": 1800,
		"Sessions":       odataID(sessionsPath),
	}
}

func sessionDoc(id, user string) map[string]any {
	return map[string]any{
		"@odata.id":   sessionsPath + "/" + id,
		"@odata.type": "#Session.v1_6_0.Session",
		"Id":          id,
		"Name":        "User Session",
		"UserName":    user,
	}
}

func writeJSON(w http.ResponseWriter, code int, doc any) {
	b, err := json.Marshal(doc)
	if err != nil {
		http.Error(w, "error encoding the document", http.StatusInternalServerError)

		return
	}

	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(code)
	_, _ = w.Write(b) // the client went away
}

// writeError answers with a Redfish error: a message of the Base registry.
func writeError(w http.ResponseWriter, code int, messageID, message string) {
	severity := "Critical"
	if code < http.StatusInternalServerError {
		severity = "Warning"
	}

	writeJSON(w, code, map[string]any{
		"error": map[string]any{
			"code":    registry + messageID,
			"message": message,
			"@Message.ExtendedInfo": []map[string]any{{
				"@odata.type": "#Message.v1_1_1.Message",
				"MessageId":   registry + messageID,
				"Message":     message,
				"Severity":    severity,
			}},
		},
	})
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "ResourceNotFound", fmt.Sprintf("There is no resource at %s.", r.URL.Path))
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "The method is not allowed on this resource; allowed: "+allow+".")
}

// readJSON decodes a request body into v, answering 400 when it is not one JSON object.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))

	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}

	if errors.Is(err, io.EOF) {
		err = errors.New("the body is empty")
	}

	if err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON",
			fmt.Sprintf("The request body is not a valid JSON object: %v.", err))

		return false
	}

	return true
}
