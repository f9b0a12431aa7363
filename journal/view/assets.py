# ruff: noqa: E501, RUF001 - CSS and JavaScript text, not Python: their lines are kept whole
"""The page's style and script, kept in the package as text: the viewer needs no network, no
CDN and no file beside the code (a wheel carries them as it carries any module)."""

from __future__ import annotations

STYLE_CSS = r"""
:root{--bg:#fbfbfa;--fg:#1d1f23;--dim:#6a6f78;--line:#e4e4e0;--card:#ffffff;--accent:#2f5fd0;--user:#eef3ff;
--asst:#f6f6f3;--tool:#fff8ec;--ok:#1e7f4f;--warn:#a86400;--err:#b3261e;--closer:#7a3ea8;--mono:ui-monospace,
"SFMono-Regular","DejaVu Sans Mono",Menlo,Consolas,monospace;--sans:system-ui,-apple-system,"Segoe UI",Roboto,
"Noto Sans","DejaVu Sans",sans-serif;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#15171b;--fg:#e6e6e3;--dim:#9aa0aa;--line:#2b2f36;--card:#1c1f24;
--accent:#8fb0ff;--user:#1d2740;--asst:#1f2227;--tool:#2a2418;--ok:#5fd39a;--warn:#f0b45a;--err:#ff8a80;
--closer:#c9a2f0}}
*{box-sizing:border-box}html{font-size:15px}
body{margin:0;background:var(--bg);color:var(--fg);font-family:var(--sans);line-height:1.5}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
header.top{padding:18px max(28px,calc((100% - 1200px)/2 + 28px)) 12px;border-bottom:1px solid var(--line);background:var(--card)}
header.top h1{font-size:1.35rem;margin:0 0 2px;font-weight:650;letter-spacing:-.01em}
header.top .sub{margin:0;color:var(--dim);font-size:.9rem}
main{padding:16px 28px 60px;max-width:1200px;margin:0 auto}
.id{font-family:var(--mono);font-size:.82rem;color:var(--dim)}
.chip{display:inline-block;border:1px solid var(--line);border-radius:10px;padding:0 7px;font-size:.78rem;
color:var(--dim);margin-right:4px;white-space:nowrap}
.badge{display:inline-block;border-radius:4px;padding:0 6px;font-size:.76rem;font-weight:600;
background:var(--line);color:var(--fg);margin-right:4px;white-space:nowrap}
.badge.ok,.badge.st-clean{background:color-mix(in srgb,var(--ok) 18%,transparent);color:var(--ok)}
.badge.warn,.badge.st-paused,.badge.st-interrupted{background:color-mix(in srgb,var(--warn) 20%,transparent);color:var(--warn)}
.badge.err,.badge.st-damaged{background:color-mix(in srgb,var(--err) 18%,transparent);color:var(--err)}
.badge.closer,.badge.st-repaired{background:color-mix(in srgb,var(--closer) 18%,transparent);color:var(--closer)}
.badge.st-live{background:color-mix(in srgb,var(--accent) 20%,transparent);color:var(--accent)}
.toolbar{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:4px 0 14px}
.toolbar input[type=search],.toolbar select{font:inherit;padding:5px 9px;border:1px solid var(--line);border-radius:6px;
background:var(--card);color:var(--fg)}
.toolbar input[type=search]{min-width:260px}#q{flex:1;max-width:640px}
aside dl{display:grid;grid-template-columns:auto 1fr;gap:2px 12px;margin:0;font-size:.88rem}aside dt{color:var(--dim)}aside dd{margin:0}
table.sessions time{white-space:nowrap}
.toolbar label{font-size:.88rem;color:var(--dim)}
button{font:inherit;padding:4px 11px;border:1px solid var(--line);border-radius:6px;background:var(--card);color:var(--fg);cursor:pointer}
button:disabled{opacity:.45;cursor:default}
table.sessions{width:100%;border-collapse:collapse;background:var(--card);border:1px solid var(--line);border-radius:8px;overflow:hidden}
table.sessions th{text-align:left;font-size:.8rem;text-transform:uppercase;letter-spacing:.04em;color:var(--dim);
font-weight:600;padding:8px 10px;border-bottom:1px solid var(--line);white-space:nowrap}
table.sessions th[data-sort]{cursor:pointer}table.sessions th.sorted::after{content:" ▾"}
table.sessions th.sorted.asc::after{content:" ▴"}
table.sessions td{padding:8px 10px;border-bottom:1px solid var(--line);vertical-align:top;font-size:.9rem}
table.sessions tr:last-child td{border-bottom:0}table.sessions tr:hover td{background:color-mix(in srgb,var(--accent) 5%,transparent)}
td.title{max-width:480px}td.title a{font-weight:550;color:var(--fg)}td.title .sub{font-size:.8rem;color:var(--dim)}
td.num{text-align:right;font-variant-numeric:tabular-nums}
time{color:var(--dim);font-size:.85rem;font-variant-numeric:tabular-nums}
.pager{display:flex;gap:10px;align-items:center;margin:12px 0;color:var(--dim);font-size:.9rem}
.results{margin:0 0 16px;padding:0;list-style:none}
.results li{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 12px;margin-bottom:6px}
.results .snip{font-family:var(--mono);font-size:.84rem;white-space:pre-line;word-break:break-word;max-height:4.6em;overflow:hidden}
mark{background:color-mix(in srgb,#ffd54a 55%,transparent);color:inherit;border-radius:2px}
.layout{display:grid;grid-template-columns:minmax(0,1fr) 300px;gap:22px}
@media (max-width:900px){.layout{grid-template-columns:1fr}}
aside section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;margin-bottom:14px}
aside h2,section.gate h2,.damage-banner h2{font-size:.95rem;margin:0 0 6px}
section.gate{background:var(--card);border:1px solid var(--line);border-left:4px solid var(--ok);border-radius:8px;padding:10px 14px;margin-bottom:14px}
section.gate.paused{border-left-color:var(--warn)}section.gate.grant{border-left-color:var(--accent)}section.gate .verdict{text-transform:uppercase}
section.gate.paused .verdict{color:var(--warn)}section.gate h2 .dim{font-weight:400}
.reasons{margin:0;padding-left:18px;font-size:.88rem}.reasons .options{color:var(--dim);margin:2px 0 6px}
.sev-info{color:var(--dim)}
.damage-banner{border:1px solid var(--err);border-left:5px solid var(--err);background:color-mix(in srgb,var(--err) 8%,var(--card));
border-radius:8px;padding:10px 16px;margin-bottom:16px}.damage-banner h2{color:var(--err)}
.timeline{display:flex;flex-direction:column;gap:6px}
article.ev{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:6px 12px;outline:none;scroll-margin:80px}
article.ev:focus,article.ev:target{box-shadow:0 0 0 2px var(--accent)}
article.ev header{display:flex;flex-wrap:wrap;gap:8px;align-items:baseline;font-size:.82rem}
article.ev header time{margin-left:auto}
article.ev .seq{font-family:var(--mono);color:var(--dim)}article.ev .type{font-weight:600}
article.ev .tool{font-family:var(--mono);background:var(--tool);padding:0 6px;border-radius:4px}
article.ev pre{margin:4px 0 2px;white-space:pre-wrap;word-break:break-word;font-family:var(--mono);font-size:.84rem;line-height:1.45}
article.ev pre.text{font-family:var(--sans);font-size:.95rem}
article.msg-user{background:var(--user)}article.msg-assistant{background:var(--asst)}
article.g-tool{border-left:3px solid var(--warn)}
article.g-structure{padding:2px 12px;background:transparent;border-style:dashed}
article.turn{margin-top:14px;border-style:solid;border-left:4px solid var(--accent);background:var(--card)}
article.synthetic{border:1px solid var(--closer);border-left:4px solid var(--closer);background:color-mix(in srgb,var(--closer) 7%,var(--card))}
article.damage{border:1px solid var(--err);border-left:4px solid var(--err)}
article.hidden{display:none}
.why{margin:4px 0;font-size:.9rem}.must{margin:2px 0;font-size:.88rem;color:var(--dim)}
.forkpoint{margin:4px 0;font-size:.88rem;color:var(--accent)}.meta{margin:2px 0}.usage{margin:2px 0}
.dim{color:var(--dim)}.cut{font-size:.82rem;color:var(--dim);margin:0}
ul.artifacts{list-style:none;margin:.3rem 0;padding:0;font-size:.84rem}ul.artifacts li{margin:.1rem 0}
button.artifact-check{border:1px solid var(--dim);background:none;color:var(--dim);cursor:pointer}
details.long>summary{cursor:pointer;color:var(--dim);font-size:.84rem}
.tree{list-style:none;padding-left:14px;margin:0;font-size:.88rem}.tree .here>a{font-weight:700;color:var(--fg)}
.branches{padding-left:4px;font-family:var(--mono);font-size:.8rem}.branches .path>a{font-weight:600}aside h2+p{margin:0 0 4px;font-size:.82rem}
#facts h2{margin-top:12px}
.live-dot{display:inline-block;width:8px;height:8px;border-radius:50%;background:var(--ok);margin-right:5px;animation:pulse 1.6s infinite}
@keyframes pulse{50%{opacity:.3}}
.keys{font-size:.8rem;color:var(--dim)}kbd{font-family:var(--mono);border:1px solid var(--line);border-radius:3px;padding:0 4px}
#loading{color:var(--dim);font-size:.88rem;padding:8px}
"""

APP_JS = r"""
"use strict";
(function(){
const body=document.body, page=body.dataset.page;
const $=(s,r)=>(r||document).querySelector(s), $$=(s,r)=>Array.from((r||document).querySelectorAll(s));
async function getJSON(url){const r=await fetch(url,{credentials:"same-origin"});if(!r.ok)throw new Error(url+": "+r.status);return r.json();}
function frag(html){const t=document.createElement("template");t.innerHTML=html;return t.content;}

function storePage(){
  const form=$("#filters"), tbody=$("#rows"), info=$("#count"), prev=$("#prev"), next=$("#next");
  const st={sort:body.dataset.sort||"updated",order:body.dataset.order||"desc",offset:0,limit:+body.dataset.limit||50,total:+body.dataset.total||0};
  let timer=null;
  function params(){const p=new URLSearchParams(new FormData(form));p.delete("q");
    p.set("sort",st.sort);p.set("order",st.order);p.set("offset",st.offset);p.set("limit",st.limit);return p;}
  async function load(){
    const d=await getJSON("/api/sessions?"+params());
    tbody.replaceChildren(frag(d.html));st.total=d.total;
    info.textContent=`${d.total.toLocaleString()} session${d.total==1?"":"s"}`+(d.total?` · ${d.offset+1}–${Math.min(d.offset+d.limit,d.total)}`:"")
      +(d.indexing&&d.indexing.done<d.indexing.total?` · indexing ${d.indexing.done}/${d.indexing.total}`:"");
    prev.disabled=st.offset<=0;next.disabled=st.offset+st.limit>=st.total;
    $$("th[data-sort]").forEach(th=>{th.classList.toggle("sorted",th.dataset.sort==st.sort);th.classList.toggle("asc",st.order=="asc");});
    body.dataset.loaded=String(Date.now());
    clearTimeout(timer);if(d.indexing&&d.indexing.done<d.indexing.total)timer=setTimeout(load,1500);
  }
  $$("th[data-sort]").forEach(th=>th.addEventListener("click",()=>{
    if(st.sort==th.dataset.sort)st.order=st.order=="asc"?"desc":"asc";else{st.sort=th.dataset.sort;st.order=th.dataset.sort=="title"?"asc":"desc";}
    st.offset=0;load();}));
  form.addEventListener("change",()=>{st.offset=0;load();});
  $("#filter-text").addEventListener("input",()=>{clearTimeout(timer);timer=setTimeout(()=>{st.offset=0;load();},200);});
  prev.addEventListener("click",()=>{st.offset=Math.max(0,st.offset-st.limit);load();});
  next.addEventListener("click",()=>{st.offset+=st.limit;load();});
  const q=$("#q"), results=$("#results");
  async function search(){
    const text=q.value.trim();if(!text){results.replaceChildren();results.dataset.q="";return;}
    const d=await getJSON("/api/search?q="+encodeURIComponent(text));
    results.replaceChildren(frag(d.html));results.dataset.q=text;
  }
  $("#search").addEventListener("submit",e=>{e.preventDefault();search();});
  q.addEventListener("input",()=>{clearTimeout(q._t);q._t=setTimeout(search,250);});
  document.addEventListener("keydown",e=>{if(e.key=="/"&&document.activeElement.tagName!="INPUT"){e.preventDefault();q.focus();}});
  if(+body.dataset.pending)timer=setTimeout(load,1500);
}

function sessionPage(){
  const sid=body.dataset.sid, base="/api/session/"+encodeURIComponent(sid);
  const tl=$("#timeline"), more=$("#loading"), form=$("#evfilters");
  let next=+body.dataset.next, done=body.dataset.done=="1", es=null, want=null;
  function params(){const p=new URLSearchParams();const g=$$("input[name=g]:checked",form).map(i=>i.value);
    if(g.length!=$$("input[name=g]",form).length)p.set("groups",g.join(","));const t=$("#tool",form).value;if(t)p.set("tool",t);return p;}
  // One request at a time: a caller while one is under way gets that one's promise (so code that
  // waits for a page, as going to an event far down does, never spins on a busy loader).
  let inflight=null;
  function page(){
    if(done)return Promise.resolve();
    if(inflight)return inflight;
    inflight=(async()=>{
      const p=params();p.set("after",next);if(want&&want>next+200)p.set("limit",2000);
      const d=await getJSON(base+"/events?"+p);
      tl.appendChild(frag(d.html));next=d.next;done=d.done;
      if(done){more.textContent="";live();}else more.textContent=`loaded to seq ${next.toLocaleString()} of ${d.last_seq.toLocaleString()}`;
    })().finally(()=>{inflight=null;if(!done&&!want&&more.getBoundingClientRect().top<innerHeight*2)page();});
    return inflight;
  }
  new IntersectionObserver(es=>{if(es.some(e=>e.isIntersecting))page();},{rootMargin:"800px"}).observe(more);
  // The live tail starts once the timeline has been read to its end, from where that read stopped.
  function live(){
    if(es)es.close();const p=params();p.set("after",next);
    es=new EventSource(base+"/stream?"+p);
    es.addEventListener("items",e=>{const d=JSON.parse(e.data);next=d.last;body.dataset.last=d.last;
      tl.appendChild(frag(d.html));
      $("#last").textContent=String(d.last);
      clearTimeout(sumTimer);sumTimer=setTimeout(summary,1000);});
    es.addEventListener("open",()=>$("#live").hidden=false);
    es.addEventListener("error",()=>{$("#live").hidden=true;});
  }
  form.addEventListener("change",async()=>{if(es){es.close();es=null;$("#live").hidden=true;}
    if(inflight)await inflight.catch(()=>{});  // its events are of the old filter
    tl.replaceChildren();next=0;done=false;await page();});
  function summary(){getJSON(base+"/summary").then(d=>{$("#gate").replaceChildren(frag(d.gate_html));$("#facts").replaceChildren(frag(d.facts_html));
    const h=$("header.top h1");if(d.summary.title&&h.textContent==sid){h.textContent=d.summary.title;document.title=d.summary.title+" · journal view";}
    body.dataset.summary="1";}).catch(e=>{$("#gate").textContent=String(e);});}
  let sumTimer=null;
  summary();
  function target(){const m=location.hash.match(/^#e(\d+)$/);if(!m)return;want=+m[1];
    const a=document.getElementById("e"+m[1]);
    if(a){want=null;$$("details",a).forEach(d=>d.open=true);a.focus({preventScroll:true});a.scrollIntoView({block:"center"});}
    else if(!done)page().then(target);}
  addEventListener("hashchange",target);
  if(!done)page().then(target);else{target();live();}
  function evs(){return $$("article.ev",tl).filter(a=>a.offsetParent!==null);}
  function move(d,sel){const all=sel?evs().filter(a=>a.matches(sel)):evs();if(!all.length)return;
    const cur=document.activeElement, i=all.indexOf(cur);let j;
    if(i<0){const y=0;j=d>0?all.findIndex(a=>a.getBoundingClientRect().top>=y):all.length-1;if(j<0)j=all.length-1;}
    else j=Math.max(0,Math.min(all.length-1,i+d));
    all[j].focus();all[j].scrollIntoView({block:"nearest"});}
  document.addEventListener("keydown",e=>{
    if(e.target.tagName=="INPUT"||e.target.tagName=="SELECT"||e.ctrlKey||e.metaKey||e.altKey)return;
    const k=e.key;
    if(k=="j"||k=="ArrowDown"&&document.activeElement.matches("article.ev")){e.preventDefault();move(1);}
    else if(k=="k"||k=="ArrowUp"&&document.activeElement.matches("article.ev")){e.preventDefault();move(-1);}
    else if(k=="n"){move(1,"article.turn");}else if(k=="p"){move(-1,"article.turn");}
    else if(k=="c"){move(1,"article.synthetic,article.damage");}
    else if(k=="g"){const a=evs()[0];if(a){a.focus();a.scrollIntoView();}}
    else if(k=="G"){const a=evs().pop();if(a){a.focus();a.scrollIntoView();}}
    else if(k=="Enter"||k=="o"){const a=document.activeElement;if(a&&a.matches("article.ev")){$$("details",a).forEach(d=>d.open=!d.open);checkArtifacts(a);}}
  });
}
// An artifact's verdict is asked for when its event is expanded or its button pressed, never at
// render: a long page does not hash every blob it references.
async function checkOne(b){if(b.disabled)return;b.disabled=true;b.textContent="checking…";
  try{const d=await getJSON("/api/artifact/"+encodeURIComponent(b.dataset.digest));const s=document.createElement("span");
    s.className="badge artifact-state "+(d.state=="verified"?"ok":"err");s.textContent=d.badge;b.replaceWith(s);}
  catch(e){b.disabled=false;b.textContent="check failed: retry";}}
function checkArtifacts(root){$$("button.artifact-check",root).forEach(checkOne);}
document.addEventListener("click",e=>{const b=e.target.closest&&e.target.closest("button.artifact-check");if(b)checkOne(b);});
document.addEventListener("toggle",e=>{const a=e.target.open&&e.target.closest&&e.target.closest("article.ev");if(a)checkArtifacts(a);},true);
if(page=="store")storePage();else if(page=="session")sessionPage();
})();
"""
