package rules

// DefaultPolicyAction is the reply of a policy rule without its own text.
const DefaultPolicyAction = "DEFER_IF_PERMIT Rate limit reached for {key}: {count}/{limit} per {period}; try again in {retry} seconds"

// DefaultMilterRefuse is the milter's refusal of a session whose class
// holds its refuse cap.
const DefaultMilterRefuse = "421 4.7.0 Too many sessions from class {class} ({sessions}/{refuse}); try again later"
