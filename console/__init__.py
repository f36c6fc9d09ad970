"""The console pages that span apps: overview, playground, heatmap, expert pages, review queue, API keys, navigation."""
