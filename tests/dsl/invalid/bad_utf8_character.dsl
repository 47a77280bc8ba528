model tiny
let x = 3 · 4
