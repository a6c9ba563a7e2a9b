// Reading a page again every few seconds: one request at a time (the next wait starts when
// the last reading ended), none while the tab is hidden or the operator paused, and none
// once the page has been left. `readOnce` reads and resolves to a function that shows what
// it read, so that a reading that lands after a pause changes nothing.

export class Refresher {
  constructor(root, periodMs, readOnce, onState) {
    this.root = root;
    this.periodMs = periodMs;
    this.readOnce = readOnce;
    this.onState = onState;
    this.paused = false;
    this.busy = false;
    this.timer = null;
    this.lastError = null;
    this.lastAt = null;
    this.visibility = () => (document.hidden ? this.cancel() : this.schedule(0));
  }

  start() {
    document.addEventListener("visibilitychange", this.visibility);
    this.lastAt = Date.now();
    this.schedule(this.periodMs);
  }

  toggle() {
    this.paused = !this.paused;
    if (this.paused) this.cancel();
    else this.schedule(0);
    this.report();
  }

  cancel() {
    clearTimeout(this.timer);
    this.timer = null;
  }

  schedule(delayMs) {
    this.cancel();
    if (this.paused || this.busy || document.hidden) return;
    this.timer = setTimeout(() => this.tick(), delayMs);
  }

  alive() {
    if (this.root.isConnected) return true;
    this.cancel();
    document.removeEventListener("visibilitychange", this.visibility);
    return false;
  }

  async tick() {
    this.timer = null;
    if (this.paused || !this.alive()) return;
    this.busy = true;
    let show = null;
    try {
      show = await this.readOnce();
    } catch (error) {
      this.lastError = error;
    } finally {
      this.busy = false;
    }
    if (!this.alive()) return;
    if (show && !this.paused) {
      show();
      this.lastError = null;
      this.lastAt = Date.now();
    }
    this.report();
    this.schedule(this.periodMs);
  }

  report() {
    this.onState({ paused: this.paused, lastAt: this.lastAt, error: this.lastError });
  }
}
