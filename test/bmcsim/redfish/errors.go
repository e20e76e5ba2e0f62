package redfish

import (
	"fmt"
	"net/http"
)

// baseRegistry is the DMTF Base message registry version the emulator cites.
const baseRegistry = "Base.1.18"

// Message IDs (without the registry prefix) of the Base registry messages the
// emulator sends.
const (
	msgNoValidSession            = "NoValidSession"
	msgResourceAtURIUnauthorized = "ResourceAtUriUnauthorized"
	msgSessionLimitExceeded      = "SessionLimitExceeded"
	msgResourceNotFound          = "ResourceNotFound"
	msgOperationNotAllowed       = "OperationNotAllowed"
	msgMalformedJSON             = "MalformedJSON"
	msgPropertyMissing           = "PropertyMissing"
	msgActionParameterMissing    = "ActionParameterMissing"
	msgActionParameterNotSupp    = "ActionParameterNotSupported"
	msgPreconditionFailed        = "PreconditionFailed"
	msgInternalError             = "InternalError"
	msgServiceTemporarilyUnavail = "ServiceTemporarilyUnavailable"
	msgGeneralError              = "GeneralError"
	msgResourceInStandby         = "ResourceInStandby"
)

// redfishError builds a Redfish error response body (DSP0266 "Error
// responses"): an "error" object with code, message and one
// @Message.ExtendedInfo entry.
func redfishError(id, message, resolution string) map[string]any {
	code := baseRegistry + "." + id
	return map[string]any{
		"error": map[string]any{
			"code":    code,
			"message": message,
			"@Message.ExtendedInfo": []any{map[string]any{
				"@odata.type":     "#Message.v1_1_1.Message",
				"MessageId":       code,
				"Message":         message,
				"Severity":        "Critical",
				"MessageSeverity": "Critical",
				"Resolution":      resolution,
			}},
		},
	}
}

// statusError returns the generic error body the emulator sends for an
// injected failure status.
func statusError(code int) map[string]any {
	switch code {
	case http.StatusUnauthorized:
		return errNoValidSession()
	case http.StatusInternalServerError:
		return redfishError(msgInternalError,
			"The request failed due to an internal service error.  The service is still operational.",
			"Resubmit the request.  If the problem persists, consider resetting the service.")
	case http.StatusServiceUnavailable:
		return redfishError(msgServiceTemporarilyUnavail,
			"The service is temporarily unavailable.  Retry in 30 seconds.",
			"Wait for the indicated retry duration and retry the operation.")
	default:
		return redfishError(msgGeneralError,
			fmt.Sprintf("A general error has occurred (HTTP %d %s).", code, http.StatusText(code)),
			"None.")
	}
}

func errNoValidSession() map[string]any {
	return redfishError(msgNoValidSession,
		"There is no valid session established with the implementation.",
		"Establish a session before attempting any operations.")
}
