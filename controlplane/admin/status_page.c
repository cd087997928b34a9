/*
 * Embeds controlplane/admin/status_page.html (see status_page.h) with the
 * assembler's .incbin, so the page stays an ordinary HTML file to edit and
 * review, and the binary needs no file at run time. The path is relative to
 * the directory the compiler runs in, the repository root (the Makefile
 * runs there and lists the HTML file as a prerequisite of this object).
 */
#include "controlplane/admin/status_page.h"

__asm__(".pushsection .rodata\n"
        ".global sy_status_page_start\n"
        ".type sy_status_page_start, @object\n"
        "sy_status_page_start:\n"
        ".incbin \"controlplane/admin/status_page.html\"\n"
        ".global sy_status_page_end\n"
        ".type sy_status_page_end, @object\n"
        "sy_status_page_end:\n"
        ".byte 0\n"
        ".popsection\n");

extern const char sy_status_page_start[];
extern const char sy_status_page_end[];

const char *adm_status_page(size_t *len)
{
    *len = (size_t)(sy_status_page_end - sy_status_page_start);
    return sy_status_page_start;
}
