"""The recorder (GPU side). Imports torch; nothing else in streamrace needs it."""
