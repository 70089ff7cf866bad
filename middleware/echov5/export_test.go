package guardecho

// StoreKnown reports whether the middleware can copy a context's values.
func StoreKnown() bool { return storeKnown }
